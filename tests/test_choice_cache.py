"""Snapshots and policy choices are kept per node state and never outlive it."""

from __future__ import annotations

from gpuallocd.allocator.leases.choices import ChoiceCache
from gpuallocd.allocator.leases.node_view import NodeView
from gpuallocd.model import GpuProcess, Lease, LeasedGpu, LiveState
from gpuallocd.policies import NodeSnapshot, get_policy
from gpuallocd.policies.base import AllocationRequest, Choice
from gpuallocd.topology import load_topology

TOPOLOGY = load_topology("example:dgx1-volta")


def lease_on(index: int, uid: int = 1000) -> Lease:
    gpu = TOPOLOGY.gpus[index]
    return Lease(
        id=f"lease-{index}",
        gpus=(LeasedGpu(gpu.uuid, index),),
        owner_uid=uid,
        owner_name="ana",
        pid=1,
        label=None,
        policy="best-effort",
        created_at=0.0,
        expires_at=60.0,
    )


class CountingPolicy:
    """The real best-effort policy, counting how often it is asked."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0
        self._inner = get_policy("best-effort")

    def choose(self, snapshot: NodeSnapshot, request: AllocationRequest) -> Choice:
        self.calls += 1
        return self._inner.choose(snapshot, request)


def test_the_same_state_gives_the_same_snapshot_object() -> None:
    """Allocate then free returns to a state whose snapshot is reused, not rebuilt."""
    view = NodeView(TOPOLOGY)
    idle_key, idle = view.keyed_snapshot([])
    busy_key, busy = view.keyed_snapshot([lease_on(0)])
    assert busy_key != idle_key and not busy.views[TOPOLOGY.gpus[0].uuid].free
    assert view.keyed_snapshot([]) == (idle_key, idle)
    assert view.keyed_snapshot([lease_on(0)])[1] is busy


def test_a_new_live_sample_or_topology_starts_a_new_state() -> None:
    """Health, memory or processes change what a policy sees: the old snapshot is not used."""
    view = NodeView(TOPOLOGY)
    key, _ = view.keyed_snapshot([])
    sick = TOPOLOGY.gpus[3].uuid
    view.update_live({sick: LiveState(healthy=False, health_reason="Xid 79")})
    new_key, after = view.keyed_snapshot([])
    assert new_key != key and not after.views[sick].available
    view.adopt(TOPOLOGY)
    assert view.keyed_snapshot([])[0] not in (key, new_key)


def test_an_unchanged_live_sample_keeps_the_state() -> None:
    """Sampling the same values again does not throw away what was computed."""
    view = NodeView(TOPOLOGY)
    view.update_live({TOPOLOGY.gpus[1].uuid: LiveState(memory_used_bytes=5)})
    key, snapshot = view.keyed_snapshot([])
    view.update_live({TOPOLOGY.gpus[1].uuid: LiveState(memory_used_bytes=5)})
    assert view.keyed_snapshot([]) == (key, snapshot)


def test_foreign_use_is_part_of_the_state() -> None:
    """A process of another user on a leased GPU makes it foreign-used, in the key too."""
    view = NodeView(TOPOLOGY)
    gpu = TOPOLOGY.gpus[2].uuid
    view.update_live({gpu: LiveState(processes=(GpuProcess(pid=9, uid=2000),))})
    mine_key, _ = view.keyed_snapshot([lease_on(2, uid=2000)])
    theirs_key, theirs = view.keyed_snapshot([lease_on(2, uid=1000)])
    assert mine_key[2] == frozenset() and theirs_key[2] == frozenset({gpu})
    assert theirs.views[gpu].foreign_use


def test_a_policy_is_asked_once_per_state_and_request() -> None:
    """The choice for a repeated state and request is reused; another request is asked."""
    view, cache, policy = NodeView(TOPOLOGY), ChoiceCache(), CountingPolicy()
    for _ in range(3):
        key, snapshot = view.keyed_snapshot([])
        first = cache.choose("counting", policy, key, snapshot, AllocationRequest(count=2))
        key, snapshot = view.keyed_snapshot([lease_on(0)])
        cache.choose("counting", policy, key, snapshot, AllocationRequest(count=2))
    assert policy.calls == 2
    cache.choose("counting", policy, key, snapshot, AllocationRequest(count=3))
    assert policy.calls == 3
    assert first == get_policy("best-effort").choose(
        NodeSnapshot.from_busy(TOPOLOGY), AllocationRequest(count=2)
    )


def test_a_snapshot_shows_each_gpu_as_its_state_says() -> None:
    """Busy, healthy, memory and foreign use in a snapshot are what `from_busy` makes of the
    same state, and a GPU whose processes are gone is no longer foreign-used."""
    view, gpus = NodeView(TOPOLOGY), TOPOLOGY.gpus
    live = {
        gpus[1].uuid: LiveState(memory_used_bytes=5),
        gpus[2].uuid: LiveState(processes=(GpuProcess(pid=9, uid=2000),)),
        gpus[3].uuid: LiveState(healthy=False, health_reason="Xid 79"),
    }
    view.update_live(live)
    for leases in ([], [lease_on(0)], [lease_on(2, uid=1000)], [lease_on(0), lease_on(2)]):
        key, snapshot = view.keyed_snapshot(leases)
        expected = NodeSnapshot.from_busy(TOPOLOGY, busy=key[1], live=live, foreign=key[2])
        assert dict(snapshot.views) == dict(expected.views)
    view.update_live({})
    key, snapshot = view.keyed_snapshot([lease_on(2, uid=1000)])
    assert key[2] == frozenset() and not snapshot.views[gpus[2].uuid].foreign_use
