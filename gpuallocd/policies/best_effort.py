"""`best-effort`: the best-connected set of free GPUs, exactly, doing the least damage.

The set has the highest topology score of all sets of the asked size among the free GPUs
(see `scoring`): NVLink/XGMI lanes first, then the PCIe path, then NUMA. Among sets of
equal score it takes the one that cuts the least link quality away from the GPUs that
stay free, then the lowest indices. The search is exact (`search/engine.py`); only a search
that reaches `max_search_nodes` returns an unproven set, and its reason says so.
"""

from __future__ import annotations

from gpuallocd.policies.base import AllocationRequest, Choice, NodeSnapshot
from gpuallocd.policies.common import candidates
from gpuallocd.policies.search.picker import Picker
from gpuallocd.policies.topology_choice import describe_score, pick_by_topology, search_note

__all__ = ["DEFAULT_MAX_SEARCH_NODES", "BestEffortPolicy"]

# About 10 to 20 seconds of search on one core, far beyond what any 16-GPU request needs.
DEFAULT_MAX_SEARCH_NODES = 1_000_000


class BestEffortPolicy:
    """Highest topology score, exactly; least damage to what stays free among equals."""

    name = "best-effort"

    def __init__(
        self, *, max_search_nodes: int | None = DEFAULT_MAX_SEARCH_NODES, cache_size: int = 4096
    ) -> None:
        self.max_search_nodes = max_search_nodes
        self._picker = Picker(max_nodes=max_search_nodes, cache_size=cache_size)

    def choose(self, snapshot: NodeSnapshot, request: AllocationRequest) -> Choice:
        pool = candidates(snapshot, request)
        found = pick_by_topology(self._picker, snapshot, request, pool)
        reason = (
            f"highest topology score among {len(pool) + len(request.required)} usable GPUs "
            f"({describe_score(found.score)}), least damage to the GPUs left free; "
            f"{search_note(found.pick, self.max_search_nodes)}"
        )
        return Choice(
            gpus=found.gpus,
            score=float(found.score.value),
            reason=reason,
            exact=found.pick.exact,
            search_nodes=found.pick.nodes,
        )
