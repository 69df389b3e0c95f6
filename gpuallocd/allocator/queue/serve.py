"""Serving the queue and claiming for it, in the serial worker: what the waiters get, and
which units a new request must leave to the waiters ahead of it.

Both look at the waiters through their index (`index.py`), unit by unit, never down the
whole queue: a serve looks at the waiters of the units still free
(`policies.serving.serve_where_free`), a claim at each unit's lines until a waiter ahead
may use the unit. A serve after the node's layout or the site's rules changed looks at
every waiter (`serve_in_order`): a change of either may end a waiter with an error (an
unknown GPU, a lower limit) whatever is free.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.servable import KeptFrom
from gpuallocd.allocator.leases.sharing import UnitHolders
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.allocator.queue.index import WaiterIndex
from gpuallocd.allocator.queue.view import WaitInfo
from gpuallocd.errors import CapacityError, GpuallocError
from gpuallocd.model import Caller, Lease
from gpuallocd.policies.serving import serve_in_order, serve_where_free

__all__ = [
    "LookedAt",
    "Outcome",
    "Waiter",
    "claimed_units",
    "serve_every_waiter",
    "serve_free_units",
    "taken_units",
]

Outcome = Lease | GpuallocError
OnGrant = Callable[[Lease], None]
LookedAt = Callable[["Waiter"], None]  # told of each waiter a grant or a serve looks at


def _ignore(lease: Lease) -> None:
    """The default grant hook: nothing to do."""


@dataclass(eq=False)
class Waiter:
    """A request in the queue: who asked for what, since when, and the future its answer
    comes by; two waiters are never equal (each is its own key in the index)."""

    caller: Caller
    spec: AllocateSpec
    since: float
    future: asyncio.Future[Lease]
    id: str = field(default_factory=lambda: secrets.token_hex(4))
    on_grant: OnGrant = _ignore
    seq: int = 0  # its arrival: 1 for the first waiter the queue ever had

    def to_json(self, position: int, info: WaitInfo, now: float) -> dict[str, Any]:
        """As `queue` shows it: `position` from 1, why it waits and when it may start."""
        return {
            "id": self.id,
            "position": position,
            "waited_seconds": max(0.0, now - self.since),
            "reason": info.reason,
            "reason_detail": info.detail,
            "estimated_start_at": info.estimated_start_at,
            "owner": {"uid": self.caller.uid, "user": self.caller.user},
            "pid": self.caller.pid,
            "count": self.spec.count,
            "gpus": list(self.spec.gpus),
            "policy": self.spec.policy,
            "label": self.spec.label,
            "since": self.since,
            "preemptible": self.spec.preemptible,
            "requeue_of": self.spec.requeue_of,
        }


def taken_units(leases: Iterable[Lease]) -> set[str]:
    """The units nobody may be granted while these leases last: GPUs leased whole and MIG
    instances (a shared GPU may take more shares)."""
    holders = UnitHolders.of(leases)
    return set(holders.whole) | set(holders.instances)


def _grant(
    lifecycle: LeaseLifecycle, waiter: Waiter, held: frozenset[str], looked_at: LookedAt
) -> Outcome | None:
    """The waiter's lease where it fits without the `held` units; its error where it is
    refused for another reason than capacity; None where it does not fit."""
    looked_at(waiter)
    try:
        lease = lifecycle.allocate(
            waiter.caller, waiter.spec, reserved=held, waited_since=waiter.since
        )
    except CapacityError:
        return None
    except GpuallocError as exc:
        return exc
    waiter.on_grant(lease)
    return lease


def _pool(lifecycle: LeaseLifecycle) -> Callable[[Waiter], frozenset[str]]:
    """What a waiter that does not fit holds: every unit it could use, as things are after
    the grants before it."""
    return lambda waiter: lifecycle.usable_gpus(waiter.spec, waiter.caller.uid)


def serve_every_waiter(
    lifecycle: LeaseLifecycle, ordered: Iterable[Waiter], looked_at: LookedAt
) -> list[tuple[Waiter, Outcome]]:
    """Grant every waiter that fits without jumping a blocked one, looking at each in turn;
    a waiter refused for another reason than capacity gets its error."""
    return serve_in_order(
        ordered, lambda w, held: _grant(lifecycle, w, held, looked_at), _pool(lifecycle)
    )


def serve_free_units(
    lifecycle: LeaseLifecycle,
    index: WaiterIndex[Waiter],
    key: Callable[[Waiter], Any],
    looked_at: LookedAt,
) -> list[tuple[Waiter, Outcome]]:
    """`serve_every_waiter`'s result, looking only at the waiters of units that are free and
    not held for a waiter ahead when their turn comes. `key`: the order of service, which
    each line of the index keeps."""
    taken = taken_units(lifecycle.leases())

    def grant(waiter: Waiter, held: frozenset[str]) -> Outcome | None:
        outcome = _grant(lifecycle, waiter, held, looked_at)
        if isinstance(outcome, Lease):
            taken.update(taken_units([outcome]))
        return outcome

    lines = ((unit, _waiting(line)) for unit, line in index.all_lines())
    return serve_where_free(lines, lambda u: u not in taken, grant, _pool(lifecycle), key)


def _waiting(line: Iterable[Waiter]) -> Iterator[Waiter]:
    """The waiters of a line still waiting (an answered one leaves the index soon after)."""
    return (waiter for waiter in line if not waiter.future.done())


def claimed_units(
    index: WaiterIndex[Waiter],
    kept: KeptFrom,
    ahead: Callable[[Waiter], bool],
    *,
    ahead_first: bool,
    looked_at: LookedAt,
) -> frozenset[str]:
    """Every unit that a waiter `ahead` may use now, what is kept from its owner aside (its
    leases, the units reservations keep from it). Each owner's line of a unit is passed over
    where the owner holds the unit, else looked at until a waiter ahead may use it;
    `ahead_first`: in a line, no waiter behind one that is not ahead is ahead either, so the
    look stops there too."""

    def claims(unit: str, uid: int, line: Iterable[Waiter]) -> bool:
        if unit in kept.held(uid):
            return False
        for waiter in line:
            looked_at(waiter)
            if not ahead(waiter):
                if ahead_first:
                    return False
            elif unit not in kept(uid, waiter.spec):
                return True
        return False

    return frozenset(
        unit
        for unit in index.units()
        if any(claims(unit, uid, line) for (uid, _), line in index.lines(unit).items())
    )
