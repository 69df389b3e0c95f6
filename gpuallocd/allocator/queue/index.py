"""The waiters by the units they could use: for each GPU (MIG instance, shared GPU), the
waiters whose request it could serve, a line per owner, each in order of arrival.

Kept as waiters come and go, so that a grant, a serve of the queue and the holds look at
the waiters of the units in question, not at the whole queue. What a waiter could use here
is its request's candidates on the node's layout (`NodeView.usable_gpus`); what its owner
holds and what reservations keep from it change with time, and are taken off where the
waiter is looked at (`LeaseLifecycle.kept_from`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Generic, Protocol, TypeVar

from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.model import Caller

__all__ = ["Indexed", "WaiterIndex"]


class Indexed(Protocol):
    """A waiter as the index reads it."""

    @property
    def caller(self) -> Caller: ...

    @property
    def spec(self) -> AllocateSpec: ...

    @property
    def since(self) -> float: ...


W = TypeVar("W", bound=Indexed)
Line = dict[W, None]  # one owner's waiters for one unit, in order of arrival
Owner = tuple[int, str]  # uid and user name: one fair-share account whatever it counts by


class WaiterIndex(Generic[W]):
    """The waiters in order of arrival, and by unit and owner; `candidates(spec)`: the units
    that could serve a request on the node as it is laid out now."""

    def __init__(self, candidates: Callable[[AllocateSpec], frozenset[str]]) -> None:
        self._candidates = candidates
        self._waiters: dict[W, frozenset[str]] = {}  # in order of arrival, with their units
        self._lines: dict[str, dict[Owner, Line[W]]] = {}
        self._per_owner: Counter[int] = Counter()
        self._latest_since = float("-inf")
        self.in_order = True  # no waiter came with an earlier `since` than one before it

    def __len__(self) -> int:
        return len(self._waiters)

    def __iter__(self) -> Iterator[W]:
        return iter(self._waiters)

    def __contains__(self, waiter: object) -> bool:
        return waiter in self._waiters

    def add(self, waiter: W) -> None:
        """A waiter joins, behind every other."""
        units = self._candidates(waiter.spec)
        self._waiters[waiter] = units
        owner = _owner(waiter)
        for unit in units:
            self._lines.setdefault(unit, {}).setdefault(owner, {})[waiter] = None
        self._per_owner[waiter.caller.uid] += 1
        if waiter.since < self._latest_since:
            self.in_order = False
        self._latest_since = max(self._latest_since, waiter.since)

    def remove(self, waiter: W) -> bool:
        """A waiter leaves; False if it was not there."""
        units = self._waiters.pop(waiter, None)
        if units is None:
            return False
        owner = _owner(waiter)
        for unit in units:
            owners = self._lines[unit]
            del owners[owner][waiter]
            if not owners[owner]:
                del owners[owner]
                if not owners:
                    del self._lines[unit]
        uid = waiter.caller.uid
        self._per_owner[uid] -= 1
        if not self._per_owner[uid]:
            del self._per_owner[uid]
        if not self._waiters:
            self._latest_since, self.in_order = float("-inf"), True
        return True

    def relaid(self, candidates: Callable[[AllocateSpec], frozenset[str]]) -> None:
        """The node's layout changed: every waiter's units again, in the same order."""
        waiters = list(self._waiters)
        for waiter in waiters:
            self.remove(waiter)
        self._candidates = candidates
        for waiter in waiters:
            self.add(waiter)

    def units_of(self, waiter: W) -> frozenset[str]:
        """The units the waiter could use on the node's layout."""
        return self._waiters[waiter]

    def units(self) -> Collection[str]:
        """Every unit some waiter could use."""
        return self._lines.keys()

    def lines(self, unit: str) -> Mapping[Owner, Line[W]]:
        """The unit's waiters, a line per owner, each in order of arrival."""
        return self._lines.get(unit, {})

    def all_lines(self) -> Iterator[tuple[str, Line[W]]]:
        """Every unit's lines, one pair per unit and owner."""
        for unit, owners in self._lines.items():
            for line in owners.values():
                yield unit, line

    def waiting_of(self, uid: int) -> int:
        """How many of the waiters are the user `uid`'s."""
        return self._per_owner.get(uid, 0)


def _owner(waiter: Indexed) -> Owner:
    return waiter.caller.uid, waiter.caller.user
