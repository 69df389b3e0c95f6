"""Snapshots and policy choices kept per node state, so a repeated state costs a lookup.

A node's state, as a policy sees it, is its topology, share capacity and live sample (one
`epoch` of the node view), the busy GPUs and units, the GPUs in foreign use and the memory
each shared GPU has shared out. Allocations on a busy node cycle
through few states: allocate and free return to the state before. A policy is pure (same
snapshot and request, same choice: the `Policy` contract), so its choice for a state and a
request is computed once and reused; the allocator still checks every choice it uses.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from gpuallocd.policies import NodeSnapshot, Policy
from gpuallocd.policies.base import AllocationRequest, Choice

__all__ = ["ChoiceCache", "LruCache", "StateKey"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
# epoch, busy GPUs, GPUs in foreign use, busy units (MIG instances), memory shared out
StateKey = tuple[int, frozenset[str], frozenset[str], frozenset[str], frozenset[tuple[str, int]]]

SNAPSHOTS_KEPT = 64
CHOICES_KEPT = 512


class LruCache(Generic[K, V]):
    """At most `size` values, the least recently used dropped first."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._values: OrderedDict[K, V] = OrderedDict()

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        values = self._values
        if key in values:
            values.move_to_end(key)
            return values[key]
        value = values[key] = make()
        if len(values) > self._size:
            values.popitem(last=False)
        return value

    def clear(self) -> None:
        self._values.clear()


class ChoiceCache:
    """A policy's choice per (policy, node state, request)."""

    def __init__(self, size: int = CHOICES_KEPT) -> None:
        self._choices: LruCache[tuple[str, StateKey, AllocationRequest], Choice] = LruCache(size)

    def choose(
        self,
        name: str,
        policy: Policy,
        state: StateKey,
        snapshot: NodeSnapshot,
        request: AllocationRequest,
    ) -> Choice:
        """The policy's choice, computed only the first time for this state and request."""
        return self._choices.get_or_make(
            (name, state, request), lambda: policy.choose(snapshot, request)
        )
