"""Preemptible requests wait behind the others (docs/preemption.md).

A preemptible request is work that gives its GPUs back on demand, so it never holds free GPUs
ahead of a request that may not be preempted: the queue serves the requests that may not be
preempted first (in their own order, first come or fair share), then the preemptible ones. A
requeued job (`run --requeue`) keeps its old place among these: under first come, first
served they are in the order of the place each one keeps (`queued_since`, else when it
queued). Pure: waiters in, waiters out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from gpuallocd.allocator.leases.specs import AllocateSpec

__all__ = ["ahead_of_new", "place", "tiered"]


class _Tiered(Protocol):
    @property
    def spec(self) -> AllocateSpec: ...

    @property
    def since(self) -> float: ...


W = TypeVar("W", bound=_Tiered)
P = TypeVar("P")


def place(waiter: _Tiered) -> float:
    """The time a waiter's place in its tier is counted from."""
    kept = waiter.spec.queued_since
    return waiter.since if kept is None else kept


def tiered(arranged: Sequence[tuple[W, P]], *, fair: bool) -> list[tuple[W, P]]:
    """The waiters (with what their order gave each) as the queue serves them: those that may
    not be preempted first, as arranged; then the preemptible ones, by their place under first
    come, first served (as arranged under fair share, whose priority counts the wait)."""
    firm = [entry for entry in arranged if not entry[0].spec.preemptible]
    spare = [entry for entry in arranged if entry[0].spec.preemptible]
    if not fair:
        spare.sort(key=lambda entry: place(entry[0]))
    return firm + spare


def ahead_of_new(spec: AllocateSpec, waiters: Sequence[W], now: float) -> list[W]:
    """The waiters a new request must let go first: a request that may not be preempted lets
    only those go; a preemptible one every other one, and those preemptible ones whose place
    is before its own."""
    if not spec.preemptible:
        return [w for w in waiters if not w.spec.preemptible]
    own = now if spec.queued_since is None else spec.queued_since
    return [w for w in waiters if not w.spec.preemptible or place(w) <= own]
