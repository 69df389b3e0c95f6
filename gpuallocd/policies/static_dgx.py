"""`static-dgx1` and `static-dgx2`: the fixed GPU sets of the DGX machines.

Only whole sets are handed out: on a DGX-1 single GPUs, the NVLink pairs of its
generation, the two quads, or all eight; on a DGX-2 single GPUs, pairs, quads, halves or
all sixteen. Other sizes, and machines that are not the DGX in question, fail with
PolicyNotApplicable. Among the free sets that hold the required GPUs, the set that cuts
the least link quality from the GPUs left free wins, then the first in table order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuallocd.errors import GpusUnavailable, PolicyNotApplicable
from gpuallocd.model import Topology
from gpuallocd.policies.base import AllocationRequest, Choice, NodeSnapshot
from gpuallocd.policies.common import candidates
from gpuallocd.policies.scoring import WeightMatrix, set_score
from gpuallocd.policies.search.picker import Picker

__all__ = ["DGX1_SETS", "DGX2_SETS", "StaticDgx1Policy", "StaticDgx2Policy"]

GpuSets = Mapping[int, Sequence[tuple[int, ...]]]


def _sets(pairs: Sequence[tuple[int, int]], size: int) -> GpuSets:
    singles = tuple((i,) for i in range(size))
    quads = tuple(tuple(range(i, i + 4)) for i in range(0, size, 4))
    table: dict[int, Sequence[tuple[int, ...]]] = {1: singles, 2: tuple(pairs), 4: quads}
    if size == 16:
        table[8] = (tuple(range(8)), tuple(range(8, 16)))
    table[size] = (tuple(range(size)),)
    return table


DGX1_SETS: Mapping[str, GpuSets] = {
    "pascal": _sets([(0, 2), (1, 3), (4, 6), (5, 7)], 8),
    "volta": _sets([(0, 3), (1, 2), (4, 7), (5, 6)], 8),
}
DGX2_SETS: GpuSets = _sets([(i, i + 1) for i in range(0, 16, 2)], 16)

# The hybrid cube-mesh: two fully linked quads, GPU i linked to GPU i + 4.
CUBE_MESH = frozenset(
    {(a, b) for q in (0, 4) for a in range(q, q + 4) for b in range(a + 1, q + 4)}
    | {(i, i + 4) for i in range(4)}
)


def _linked_pairs(topology: Topology) -> set[tuple[int, int]]:
    gpus = topology.gpus
    return {
        (a.index, b.index)
        for i, a in enumerate(gpus)
        for b in gpus[i + 1 :]
        if topology.link(a.uuid, b.uuid).nvlinks > 0
    }


def _require_indices(topology: Topology, size: int, machine: str) -> None:
    indices = [g.index for g in topology.gpus]
    if indices != list(range(size)):
        raise PolicyNotApplicable(
            f"this node has {len(indices)} GPU(s); a {machine} has {size}, indexed 0-{size - 1}"
        )


def dgx1_generation(topology: Topology) -> str:
    """'pascal' or 'volta' for a DGX-1 topology; PolicyNotApplicable for anything else."""
    _require_indices(topology, 8, "DGX-1")
    if _linked_pairs(topology) != CUBE_MESH:
        raise PolicyNotApplicable("the NVLinks of this node are not a DGX-1 hybrid cube-mesh")
    names = " ".join(g.name for g in topology.gpus)
    if "P100" in names:
        return "pascal"
    if "V100" in names:
        return "volta"
    gpus = topology.gpus
    wide = any(topology.link(a.uuid, b.uuid).nvlinks > 1 for a in gpus for b in gpus)
    return "volta" if wide else "pascal"


def require_dgx2(topology: Topology) -> None:
    _require_indices(topology, 16, "DGX-2")
    if len(_linked_pairs(topology)) != 16 * 15 // 2:
        raise PolicyNotApplicable(
            "a DGX-2 links every pair of GPUs over NVSwitch; this node does not"
        )


def _damage(matrix: WeightMatrix, chosen: Sequence[int], free: Sequence[int]) -> int:
    inside = set(chosen)
    return sum(matrix.weights[a][b] for a in chosen for b in free if b not in inside)


def choose_static(
    picker: Picker, snapshot: NodeSnapshot, request: AllocationRequest, table: GpuSets, label: str
) -> Choice:
    sets = table.get(request.count)
    if sets is None:
        sizes = ", ".join(str(s) for s in sorted(table))
        raise PolicyNotApplicable(f"{label} hands out {sizes} GPUs, not {request.count}")
    pool = candidates(snapshot, request)
    usable = {v.gpu.index for v in pool} | {snapshot.views[u].gpu.index for u in request.required}
    needed = {snapshot.views[u].gpu.index for u in request.required}
    fitting = [s for s in sets if needed <= set(s) <= usable]
    if not fitting:
        raise GpusUnavailable(
            f"no free {label} set of {request.count} GPU(s) holds the required GPUs"
            if needed
            else f"no free {label} set of {request.count} GPU(s)",
            count=request.count,
            available=len(usable),
        )
    matrix = picker.matrix(snapshot.topology)
    free = [matrix.position[v.uuid] for v in snapshot.available()]
    best = min(fitting, key=lambda s: _damage(matrix, s, free))
    gpus = tuple(snapshot.topology.gpus[i].uuid for i in best)
    return Choice(
        gpus=gpus,
        score=float(set_score(snapshot.topology, gpus)),
        reason=f"{label} set {list(best)}: the free set that cuts the fewest links",
    )


class StaticDgx1Policy:
    """The fixed DGX-1 sets; `generation` 'pascal' or 'volta', detected when not given."""

    name = "static-dgx1"

    def __init__(self, *, generation: str | None = None) -> None:
        if generation is not None and generation not in DGX1_SETS:
            raise ValueError(f"generation must be one of {sorted(DGX1_SETS)}, not {generation!r}")
        self.generation = generation
        self._picker = Picker(max_nodes=None, cache_size=0)

    def choose(self, snapshot: NodeSnapshot, request: AllocationRequest) -> Choice:
        detected = dgx1_generation(snapshot.topology)
        generation = self.generation or detected
        table = DGX1_SETS[generation]
        return choose_static(self._picker, snapshot, request, table, f"DGX-1 ({generation})")


class StaticDgx2Policy:
    """The fixed DGX-2 sets: pairs, quads, halves, all."""

    name = "static-dgx2"

    def __init__(self) -> None:
        self._picker = Picker(max_nodes=None, cache_size=0)

    def choose(self, snapshot: NodeSnapshot, request: AllocationRequest) -> Choice:
        require_dgx2(snapshot.topology)
        return choose_static(self._picker, snapshot, request, DGX2_SETS, "DGX-2")
