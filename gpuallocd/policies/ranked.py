"""Policies that rank GPUs by a key, breaking ties by topology then index.

The GPUs that rank strictly better than the last one needed are taken; among the GPUs that
tie at that boundary the exact topology pick chooses (highest score together with the GPUs
already taken, least damage, lowest indices).
"""

from __future__ import annotations

from typing import Any

from gpuallocd.policies.base import AllocationRequest, Choice, GpuView, NodeSnapshot
from gpuallocd.policies.common import candidates
from gpuallocd.policies.search.picker import Picker
from gpuallocd.policies.topology_choice import TopologyChoice, pick_by_topology, search_note

__all__ = ["RankedPolicy", "choose_ranked"]

MAX_SEARCH_NODES = 1_000_000


class RankedPolicy:
    """A policy that prefers GPUs with a lower `rank(view)`; subclasses name it and rank."""

    name: str
    preference: str

    def __init__(self, *, cache_size: int = 1024) -> None:
        self._picker = Picker(max_nodes=MAX_SEARCH_NODES, cache_size=cache_size)

    @staticmethod
    def rank(view: GpuView) -> Any:
        raise NotImplementedError

    def choose(self, snapshot: NodeSnapshot, request: AllocationRequest) -> Choice:
        found = choose_ranked(self._picker, snapshot, request, self.rank)
        note = search_note(found.pick, MAX_SEARCH_NODES)
        return Choice(
            gpus=found.gpus,
            score=float(found.score.value),
            reason=f"{self.preference}; ties by topology, then index; {note}",
            exact=found.pick.exact,
            search_nodes=found.pick.nodes,
        )


def choose_ranked(
    picker: Picker, snapshot: NodeSnapshot, request: AllocationRequest, rank: Any
) -> TopologyChoice:
    """The required GPUs plus the best-ranked candidates (a lower rank is better)."""
    pool = candidates(snapshot, request)
    extra = request.count - len(request.required)
    if extra == 0:
        return pick_by_topology(picker, snapshot, request, ())
    ranked = sorted(pool, key=rank)
    boundary = rank(ranked[extra - 1])
    forced = [v.uuid for v in ranked if rank(v) < boundary]
    tied = [v for v in pool if rank(v) == boundary]
    return pick_by_topology(picker, snapshot, request, tied, forced=forced)
