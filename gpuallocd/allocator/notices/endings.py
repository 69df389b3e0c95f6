"""Where each reason a lease may end gets its deadline: its TTL (the monotonic deadline the
lifecycle keeps), an advance reservation of its GPUs (the board), idle reclaim (the idle
tracker). Each answers a `Deadline` (ahead.py) or None where the reason does not apply."""

from __future__ import annotations

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.notices.ahead import Deadline
from gpuallocd.allocator.site.idle import IdleRules
from gpuallocd.allocator.site.reservation_board import ReservationBoard, caller_of_uid
from gpuallocd.model import AdvanceReservation, Lease

__all__ = ["expiry_deadline", "idle_deadline", "reservation_deadline"]


def expiry_deadline(lifecycle: LeaseLifecycle, lease: Lease) -> Deadline | None:
    """Its TTL: named by the expiry time, so a renewal arms a new deadline."""
    left = lifecycle.time_left(lease.id)
    if left is None:
        return None
    return Deadline(left, lease.expires_at, f"{lease.expires_at:.0f}")


def _ends_for(reservation: AdvanceReservation, lease: Lease, now: float) -> bool:
    """The reservation takes this lease's GPUs at its start: it starts later, holds one of
    them, the owner is not one of its own, and the lease would run past the start (a bound
    lease is renewed by its holder: it would)."""
    return (
        reservation.start_at > now
        and any(unit.gpu_uuid in reservation.gpus for unit in lease.gpus)
        and (lease.bound or lease.expires_at > reservation.start_at)
        and not reservation.admits(caller_of_uid(lease.owner_uid))
    )


def reservation_deadline(
    board: ReservationBoard, lease: Lease, now: float, only: AdvanceReservation | None = None
) -> tuple[Deadline, float] | None:
    """The soonest reservation of the board that ends the lease (or `only` that one), and the
    span to warn over (from when the reservation was made): renewals past its start are
    refused."""
    found = [only] if only is not None else board.live(now)
    ending = [r for r in found if _ends_for(r, lease, now)]
    if not ending:
        return None
    first = min(ending, key=lambda r: (r.start_at, r.id))
    why = f"reservation {first.id} for {first.holder}"
    deadline = Deadline(first.start_at - now, first.start_at, first.id, why)
    return deadline, first.start_at - first.created_at


def idle_deadline(
    rules: IdleRules, since: float, now: float, spell: float
) -> tuple[Deadline, float] | None:
    """From when an idle lease may be reclaimed for a waiter, idle since `since`; named by
    its `spell` (when the daemon first saw it idle, kept in the ledger): the idle time starts
    again at a restart, the spell runs on, so a warning told before is not told again."""
    if rules.reclaim_seconds is None:
        return None
    span = rules.reclaim_seconds + rules.grace_seconds
    at = since + span
    return Deadline(at - now, at, f"{spell:.0f}"), span
