"""Shared test support for policies: random nodes for hypothesis and a brute-force reference.

The reference ranks every subset by what `best-effort` promises: highest set score, then
least damage to the GPUs left free, then lowest indices. The tests in this module check
the reference itself on hand-computed cases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from hypothesis import assume
from hypothesis import strategies as st

from gpuallocd.model import Gpu, Link, LiveState, PcieLevel, Topology, pair_key
from gpuallocd.policies.base import AllocationRequest, NodeSnapshot
from gpuallocd.policies.scoring import weight_matrix
from gpuallocd.topology import load_topology

__all__ = [
    "Case",
    "best_by_brute_force",
    "cases",
    "indices",
    "node",
    "snapshot_of",
    "topologies",
]


def uuid_of(index: int) -> str:
    return f"GPU-test-{index:02d}"


@st.composite
def topologies(draw: st.DrawFn, min_gpus: int = 1, max_gpus: int = 10) -> Topology:
    """Random nodes: NVLink or XGMI lanes, PCIe levels (or unknown), NUMA, an NVSwitch fabric."""
    size = draw(st.integers(min_gpus, max_gpus))
    numa = st.none() | st.integers(0, 1)
    gpus = tuple(Gpu(uuid=uuid_of(i), index=i, numa_node=draw(numa)) for i in range(size))
    amd = draw(st.booleans())
    fabric = draw(st.sets(st.integers(0, size - 1))) if draw(st.booleans()) else set()
    links = {}
    for a, b in combinations(range(size), 2):
        lanes = draw(st.sampled_from((0, 0, 1, 2, 4)))
        pcie = draw(st.none() | st.sampled_from(tuple(PcieLevel)))
        on_fabric = a in fabric and b in fabric and not amd
        link = Link(
            nvlinks=12 if on_fabric else (0 if amd else lanes),
            xgmi=lanes if amd else 0,
            pcie=pcie,
            nvswitch=on_fabric,
        )
        links[pair_key(uuid_of(a), uuid_of(b))] = link
    return Topology(name="random", gpus=gpus, links=links)


@dataclass(frozen=True)
class Case:
    """A node, its state, and a request it can serve."""

    topology: Topology
    snapshot: NodeSnapshot
    request: AllocationRequest


@st.composite
def cases(draw: st.DrawFn, max_gpus: int = 10, memory: bool = False) -> Case:
    """A random node with some GPUs leased, unhealthy or in foreign use, and a fitting request."""
    topology = draw(topologies(max_gpus=max_gpus))
    uuids = list(topology.uuids())
    busy = frozenset(draw(st.sets(st.sampled_from(uuids))))
    sick = draw(st.sets(st.sampled_from(uuids)))
    foreign = frozenset(draw(st.sets(st.sampled_from(uuids))) if draw(st.booleans()) else ())
    live = {u: LiveState(healthy=False, health_reason="test") for u in sick}
    snapshot = NodeSnapshot.from_busy(topology, busy=busy, live=live, foreign=foreign)
    usable = [v.uuid for v in snapshot.available()]
    assume(usable)
    required = draw(st.lists(st.sampled_from(usable), unique=True))
    count = draw(st.integers(max(1, len(required)), len(usable)))
    request = AllocationRequest(count=count, required=tuple(required))
    return Case(topology=topology, snapshot=snapshot, request=request)


def best_by_brute_force(snapshot: NodeSnapshot, request: AllocationRequest) -> tuple[str, ...]:
    """Every subset ranked by (score, -damage, lowest indices): the set best-effort promises."""
    matrix = weight_matrix(snapshot.topology)
    rows, position = matrix.weights, matrix.position
    free = [position[v.uuid] for v in snapshot.available()]
    required = [position[u] for u in request.required]
    pool = [p for p in free if p not in required]
    best: tuple[int, int, tuple[int, ...]] | None = None
    for extra in combinations(pool, request.count - len(required)):
        chosen = sorted((*required, *extra))
        score = matrix.set_value(chosen)
        damage = sum(rows[a][b] for a in chosen for b in free if b not in chosen)
        key = (score, -damage, tuple(-p for p in chosen))
        if best is None or key > best:
            best = key
    assert best is not None
    return tuple(snapshot.topology.gpus[-p].uuid for p in sorted(best[2], reverse=True))


def node(name: str) -> Topology:
    return load_topology(f"example:{name}")


def snapshot_of(topology: Topology, busy: Sequence[int] = ()) -> NodeSnapshot:
    """A snapshot of `topology` with the GPUs at these indices leased."""
    by_index = topology.by_index()
    return NodeSnapshot.from_busy(topology, busy=frozenset(by_index[i].uuid for i in busy))


def indices(topology: Topology, uuids: Sequence[str]) -> list[int]:
    by_uuid = topology.by_uuid()
    return sorted(by_uuid[u].index for u in uuids)


def test_reference_prefers_the_nvlink_pair_on_the_workstation() -> None:
    """On a 4-GPU workstation with two NV4 bridges a pair request gets a bridged pair."""
    topology = node("workstation-4gpu-nvbridge")
    snapshot = snapshot_of(topology)
    chosen = best_by_brute_force(snapshot, AllocationRequest(count=2))
    assert indices(topology, chosen) == [0, 1]


def test_reference_takes_the_gpu_whose_partner_is_busy() -> None:
    """With GPU 1 leased, the reference's single GPU is 0, the orphan of the 0-1 bridge."""
    topology = node("workstation-4gpu-nvbridge")
    snapshot = snapshot_of(topology, busy=[1])
    chosen = best_by_brute_force(snapshot, AllocationRequest(count=1))
    assert indices(topology, chosen) == [0]
