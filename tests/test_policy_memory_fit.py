"""best-fit, worst-fit and random: placement by free memory; random is pure and seedable."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from gpulease import CountExceedsNode

from gpuallocd.errors import CountExceedsNode as CountExceedsNodeError
from gpuallocd.errors import GpusUnavailable
from gpuallocd.model import LiveState, Topology
from gpuallocd.policies.base import AllocationRequest, NodeSnapshot
from gpuallocd.policies.memory_fit import BestFitPolicy, RandomPolicy, WorstFitPolicy
from gpuallocd.policies.rules import check_request
from tests.harness import ThreadDaemon
from tests.test_policy_support import indices, node

GIB = 2**30


def with_free_memory(topology: Topology, free_gib: dict[int, int]) -> NodeSnapshot:
    """GPUs at these indices have exactly this much memory free (GiB)."""
    live = {}
    for i, free in free_gib.items():
        gpu = topology.gpus[i]
        total = gpu.memory_total_bytes or 0
        live[gpu.uuid] = LiveState(memory_used_bytes=total - free * GIB)
    return NodeSnapshot.from_busy(topology, live=live)


@pytest.fixture
def h100() -> Topology:
    return node("dgx-h100")


def test_best_fit_takes_the_tightest_fit(h100: Topology) -> None:
    """Needing 10 GiB, best-fit takes the GPU with 12 GiB free, not 11 or less."""
    state = with_free_memory(h100, {0: 5, 1: 12, 2: 30, 3: 9})
    request = AllocationRequest(count=1, min_free_memory_bytes=10 * GIB)
    assert indices(h100, BestFitPolicy().choose(state, request).gpus) == [1]


def test_an_exact_fit_fits(h100: Topology) -> None:
    """A GPU with exactly the needed memory free is a candidate, and the best fit."""
    state = with_free_memory(h100, {4: 10, 5: 11})
    request = AllocationRequest(count=1, min_free_memory_bytes=10 * GIB)
    assert indices(h100, BestFitPolicy().choose(state, request).gpus) == [4]


def test_worst_fit_takes_the_most_free_memory(h100: Topology) -> None:
    """worst-fit takes the emptiest GPUs; among equally empty ones the topology decides."""
    state = with_free_memory(h100, {0: 5, 1: 12, 2: 30, 3: 9, 4: 70, 5: 70, 6: 70, 7: 1})
    request = AllocationRequest(count=2, min_free_memory_bytes=10 * GIB)
    assert indices(h100, WorstFitPolicy().choose(state, request).gpus) == [4, 5]


def test_no_fit_is_gpus_unavailable(h100: Topology) -> None:
    """When too few GPUs have the memory, the request is refused."""
    state = with_free_memory(h100, dict.fromkeys(range(8), 3))
    request = AllocationRequest(count=1, min_free_memory_bytes=10 * GIB)
    with pytest.raises(GpusUnavailable):
        BestFitPolicy().choose(state, request)


def test_random_is_reproducible_for_a_seed(h100: Topology) -> None:
    """The same seed, snapshot and request give the same GPUs, from any instance."""
    state = with_free_memory(h100, {})
    request = AllocationRequest(count=3)
    first = RandomPolicy(seed=7).choose(state, request)
    assert RandomPolicy(seed=7).choose(state, request) == first


def test_random_depends_on_the_seed(h100: Topology) -> None:
    """Different seeds draw different sets (across a handful of seeds)."""
    state = with_free_memory(h100, {})
    request = AllocationRequest(count=3)
    drawn = {RandomPolicy(seed=s).choose(state, request).gpus for s in range(8)}
    assert len(drawn) > 1


def test_random_only_draws_fitting_gpus(h100: Topology) -> None:
    """Needing 10 GiB, random never takes a GPU with less free."""
    state = with_free_memory(h100, {0: 5, 1: 12, 2: 30, 3: 9, 4: 70, 5: 1, 6: 2, 7: 3})
    request = AllocationRequest(count=3, min_free_memory_bytes=10 * GIB)
    for seed in range(20):
        assert indices(h100, RandomPolicy(seed=seed).choose(state, request).gpus) == [1, 2, 4]


def test_a_floor_no_gpu_reaches_is_refused_at_once_even_to_a_waiter(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """On the DGX H100 (79.6 GiB GPUs), a wait for one GPU with 100 GiB free could never end:
    it is refused at once with `count_exceeds_node`, naming the largest GPU, and nothing
    queues; a wait for two with 60 GiB is a request like any other."""
    daemon = start_daemon(inventory="example:dgx-h100", default_policy="best-fit")
    with daemon.client() as client:
        with pytest.raises(CountExceedsNode) as refused:
            client.allocate(1, min_free_memory_bytes=100 * GIB, wait=True, timeout=3600)
        assert "the largest has 79.6 GiB" in str(refused.value)
        assert refused.value.details == {"count": 1, "node_gpus": 0}
        assert client.queue() == []
        lease = client.allocate(2, min_free_memory_bytes=60 * GIB, wait=True, timeout=60)
        assert len(lease.gpus) == 2


def test_a_named_gpu_smaller_than_the_floor_is_refused_by_name(h100: Topology) -> None:
    """A request naming GPU 0 (79.6 GiB) with 100 GiB free is refused at once, naming it."""
    request = AllocationRequest(
        count=1, required=(h100.gpus[0].uuid,), min_free_memory_bytes=100 * GIB
    )
    with pytest.raises(CountExceedsNodeError) as refused:
        check_request(h100, request)
    assert "GPU 0 has 79.6 GiB of memory in all" in str(refused.value)


def test_a_floor_one_byte_over_a_gpu_says_both_sizes_in_bytes(h100: Topology) -> None:
    """A floor one byte over GPU 0's memory would read "79.6 GiB, less than the 79.6 GiB":
    where GiB shows the two the same, both are said in bytes."""
    total = h100.gpus[0].memory_total_bytes
    assert total is not None
    request = AllocationRequest(
        count=1, required=(h100.gpus[0].uuid,), min_free_memory_bytes=total + 1
    )
    with pytest.raises(CountExceedsNodeError) as refused:
        check_request(h100, request)
    said = str(refused.value)
    assert f"GPU 0 has {total:,} bytes of memory in all, less than the {total + 1:,} bytes" in said
    whole = AllocationRequest(count=1, min_free_memory_bytes=total + 1)
    with pytest.raises(CountExceedsNodeError) as refused:
        check_request(h100, whole)
    assert f"the largest has {total:,} bytes" in str(refused.value)
