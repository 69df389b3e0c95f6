"""Admins' advance reservations: create (GPUs chosen by the policy, topology in mind), cancel,
and what each one waits for. Each runs in the serial worker, like any lifecycle call."""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import Hold, NodeView
from gpuallocd.allocator.queue.window import as_in_window
from gpuallocd.allocator.site.drain import DrainBoard
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.site.reservation_board import ReservationBoard, caller_of_uid
from gpuallocd.errors import CapacityError, InvalidRequest, ReservationConflict
from gpuallocd.host import users
from gpuallocd.ledger import Ledger
from gpuallocd.model import AdvanceReservation, Caller, Lease
from gpuallocd.model.durations import typed_duration
from gpuallocd.policies import get_policy
from gpuallocd.policies.rules import check_choice, request_for

__all__ = [
    "AdvanceReservations",
    "ReserveSpec",
    "held_for_status",
    "reserved_hours",
    "waiting_for",
]

MAX_RESERVATION_SECONDS = 31 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class ReserveSpec:
    """A reservation as the API read it: `count` GPUs or the `gpus` named, from `start_at`
    (or `start_in_seconds` from now, by the daemon's clock) for `duration_seconds`, for `user`
    or for the members of `group`."""

    start_at: float | None
    duration_seconds: float
    reason: str
    count: int | None = None
    gpus: tuple[str | int, ...] = ()
    user: str | None = None
    group: str | None = None
    policy: str | None = None
    start_in_seconds: float | None = None

    def start(self, now: float) -> float:
        if self.start_in_seconds is not None:
            return now + self.start_in_seconds
        if self.start_at is None:
            raise InvalidRequest("give start_at or start_in_seconds", field="start_at")
        return self.start_at


def _check(spec: ReserveSpec, start: float, now: float) -> None:
    if not math.isfinite(start):
        raise InvalidRequest("start_at must be a Unix time", field="start_at")
    if not (0 < spec.duration_seconds <= MAX_RESERVATION_SECONDS):
        raise InvalidRequest(
            "the duration must be more than 0s and at most "
            f"{typed_duration(MAX_RESERVATION_SECONDS)}",
            field="duration_seconds",
            value=spec.duration_seconds,
        )
    if start + spec.duration_seconds <= now:
        raise InvalidRequest("the reservation would end in the past", field="start_at")
    if (spec.user is None) == (spec.group is None):
        raise InvalidRequest("name either a user or a group", field="user")
    if (spec.count is None) == (not spec.gpus):
        raise InvalidRequest("give either a count or the GPUs", field="count")
    _check_names(spec)


def _check_names(spec: ReserveSpec) -> None:
    if spec.user is not None and users.account_named(spec.user) is None:
        raise InvalidRequest("no such user", field="user")
    if spec.group is not None and users.group_id(spec.group) is None:
        raise InvalidRequest("no such group", field="group")


def _choose(
    lifecycle: LeaseLifecycle,
    node: NodeView,
    drains: DrainBoard,
    policy_name: str,
    spec: ReserveSpec,
    taken: frozenset[str],
    start: float,
) -> tuple[str, ...]:
    """The policy's choice over the node as it will be at the start: GPUs of overlapping
    reservations are out; GPUs of leases due to run past the start are avoided where
    possible (the reservation would wait for them); what runs now does not count."""
    topology = node.topology
    request = request_for(topology, spec.count, spec.gpus)
    policy = get_policy(policy_name)
    unavailable = taken | frozenset(drains.covered(topology))
    past_start = [lease for lease in lifecycle.leases() if lease.expires_at > start]
    refused: CapacityError | None = None
    for leases in (past_start, []):
        snapshot = as_in_window(node.snapshot(leases, unavailable))
        try:
            choice = policy.choose(snapshot, request)
            check_choice(policy_name, choice, request, snapshot)
        except CapacityError as exc:
            refused = refused or exc
            continue
        index = {g.uuid: g.index for g in topology.gpus}
        return tuple(sorted(choice.gpus, key=index.__getitem__))
    raise ReservationConflict(
        f"not enough GPUs outside other reservations in that window ({refused.message})"
        if refused
        else "not enough GPUs outside other reservations in that window",
        gpus=sorted(taken),
        starts_at=start,
    )


def waiting_for(reservation: AdvanceReservation, leases: Iterable[Lease]) -> list[dict[str, Any]]:
    """The leases of others on its GPUs that run past its start: it waits for them."""
    gpus = set(reservation.gpus)
    return [
        {
            "lease_id": lease.id,
            "user": lease.owner_name,
            "gpus": sorted(g.index for g in lease.gpus if g.gpu_uuid in gpus),
            "until": lease.expires_at,
        }
        for lease in leases
        if lease.expires_at > reservation.start_at
        and any(g.gpu_uuid in gpus for g in lease.gpus)
        and not reservation.admits(caller_of_uid(lease.owner_uid))
    ]


def held_for_status(board: ReservationBoard, now: float) -> dict[str, Hold]:
    """The GPUs running reservations hold, as `status` shows them: reserved, position 0
    (ahead of every waiter)."""
    return {
        uuid: Hold(f"reservation {r.id}", 0, -1, r.holder)
        for uuid, r in board.holding_now(now).items()
    }


class AdvanceReservations:
    """Reservations made, cancelled and shown (each call in the serial worker), over the
    parts they read: who may make one (the quota's admin groups), the node and its drains
    their GPUs are chosen over, the board they go on, the policy of one that names none."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        *,
        quota: Quota,
        node: NodeView,
        drains: DrainBoard,
        reservations: ReservationBoard,
        default_policy: str,
    ) -> None:
        self._lifecycle = lifecycle
        self._quota = quota
        self._node = node
        self._drains = drains
        self._board = reservations
        self._default_policy = default_policy

    def reserve(self, caller: Caller, spec: ReserveSpec, now: float) -> AdvanceReservation:
        """Record a reservation (admins); its GPUs chosen like any request's."""
        self._quota.require_admin(caller, "reserve GPUs")
        start = spec.start(now)
        _check(spec, start, now)
        end = start + spec.duration_seconds
        overlapping = [r for r in self._board.live(now) if r.overlaps(start, end)]
        taken = frozenset(u for r in overlapping for u in r.gpus)
        policy_name = spec.policy or self._default_policy
        gpus = _choose(self._lifecycle, self._node, self._drains, policy_name, spec, taken, start)
        reservation = AdvanceReservation(
            id="r" + secrets.token_hex(4),
            gpus=gpus,
            start_at=start,
            end_at=end,
            user=spec.user,
            group=spec.group,
            reason=spec.reason,
            by_uid=caller.uid,
            by_user=caller.user,
            created_at=now,
        )
        self._board.add(reservation)
        return reservation

    def cancel(self, caller: Caller, reservation_id: str, now: float) -> AdvanceReservation:
        """End a reservation now (admins); its GPUs are free for everyone again."""
        self._quota.require_admin(caller, "cancel reservations")
        return self._board.cancel(reservation_id, caller.uid, now)

    def to_json(self, reservation: AdvanceReservation, now: float) -> dict[str, Any]:
        """A reservation as the API shows it: GPU indices, and the leases it waits for."""
        index = {g.uuid: g.index for g in self._node.topology.gpus}
        data = reservation.to_json(now)
        data["gpu_indices"] = [index.get(u) for u in reservation.gpus]
        live = reservation.live(now)
        data["waiting_for"] = waiting_for(reservation, self._lifecycle.leases()) if live else []
        return data

    def listing(self, ledger: Ledger, now: float, ended: bool) -> list[dict[str, Any]]:
        """Reservations to come and running (`ended`: every one the ledger keeps)."""
        found = ledger.reservations() if ended else self._board.live(now)
        return [self.to_json(r, now) for r in found]


def reserved_hours(ledger: Ledger, since: float, until: float) -> list[dict[str, Any]]:
    """Each reservation's GPU-hours inside [since, until] (up to its cancel, if any)."""
    rows = []
    for r in ledger.reservations(ended_after=since):
        end = min(r.end_at, until, r.cancelled_at if r.cancelled_at is not None else r.end_at)
        seconds = max(0.0, end - max(r.start_at, since))
        if r.start_at < until and seconds > 0:
            rows.append(
                {
                    "id": r.id,
                    "for": r.holder,
                    "gpus": len(r.gpus),
                    "gpu_hours": len(r.gpus) * seconds / 3600.0,
                    "reason": r.reason,
                }
            )
    return rows
