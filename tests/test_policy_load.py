"""packed and spread: the most or least used GPUs first; ties by topology, then index."""

from __future__ import annotations

from gpuallocd.model import LiveState, Topology
from gpuallocd.policies.base import AllocationRequest, NodeSnapshot
from gpuallocd.policies.load import PackedPolicy, SpreadPolicy
from tests.test_policy_support import indices, node

GIB = 2**30


def snapshot(topology: Topology, used: dict[int, tuple[int | None, float | None]]) -> NodeSnapshot:
    live = {
        topology.gpus[i].uuid: LiveState(memory_used_bytes=mem, utilization_percent=util)
        for i, (mem, util) in used.items()
    }
    return NodeSnapshot.from_busy(topology, live=live)


def test_packed_takes_the_most_used_memory_first() -> None:
    """packed picks the GPUs with the most memory in use."""
    topology = node("dgx-h100")
    state = snapshot(topology, {5: (40 * GIB, 10.0), 2: (20 * GIB, 90.0), 7: (1 * GIB, 0.0)})
    choice = PackedPolicy().choose(state, AllocationRequest(count=2))
    assert indices(topology, choice.gpus) == [2, 5]


def test_packed_uses_utilisation_when_memory_ties() -> None:
    """With equal memory in use, the busier GPU comes first."""
    topology = node("dgx-h100")
    state = snapshot(topology, {1: (GIB, 20.0), 6: (GIB, 80.0)})
    choice = PackedPolicy().choose(state, AllocationRequest(count=1))
    assert indices(topology, choice.gpus) == [6]


def test_spread_takes_the_least_used_and_breaks_ties_by_topology() -> None:
    """spread skips used GPUs; among the idle ones the best-connected pair wins."""
    topology = node("dgx-a100")
    state = snapshot(topology, {0: (GIB, None), 2: (None, 50.0), 4: (GIB, 0.0)})
    choice = SpreadPolicy().choose(state, AllocationRequest(count=2))
    assert indices(topology, choice.gpus) == [6, 7]


def test_unknown_use_counts_as_idle() -> None:
    """A GPU with no live data ranks as unused: packed prefers a GPU with known use."""
    topology = node("workstation-4gpu-nvbridge")
    state = snapshot(topology, {3: (GIB, None)})
    assert indices(topology, PackedPolicy().choose(state, AllocationRequest(count=1)).gpus) == [3]
    assert indices(topology, SpreadPolicy().choose(state, AllocationRequest(count=1)).gpus) == [0]


def test_packed_with_no_use_anywhere_is_best_effort() -> None:
    """On an idle node every GPU ties, so the topology decides: an NV4 bridge pair."""
    topology = node("workstation-4gpu-nvbridge")
    choice = PackedPolicy().choose(snapshot(topology, {}), AllocationRequest(count=2))
    assert indices(topology, choice.gpus) == [0, 1]
