"""best-effort: exactly the best-connected set, least damage among equals, on every node shape."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from gpuallocd.errors import GpuBusy, GpusUnavailable
from gpuallocd.model import LiveState
from gpuallocd.policies.base import AllocationRequest, NodeSnapshot
from gpuallocd.policies.best_effort import BestEffortPolicy
from gpuallocd.policies.scoring import set_score
from tests.test_policy_support import (
    Case,
    best_by_brute_force,
    cases,
    indices,
    node,
    snapshot_of,
)

PROPERTY = settings(max_examples=150, deadline=None)
# Properties the brute-force match below implies (its best set is drawn from the usable GPUs
# only, holds the required ones and has exactly `count`), and that test_policy_properties
# checks for every policy: fewer examples here, the same cases there.
IMPLIED = settings(max_examples=40, deadline=None)


def pick(
    name: str, count: int, busy: tuple[int, ...] = (), required: tuple[int, ...] = ()
) -> list[int]:
    topology = node(name)
    by_index = topology.by_index()
    request = AllocationRequest(count=count, required=tuple(by_index[i].uuid for i in required))
    choice = BestEffortPolicy().choose(snapshot_of(topology, busy), request)
    return indices(topology, choice.gpus)


# Properties ------------------------------------------------------------------------------------


@IMPLIED
@given(cases())
def test_never_picks_a_busy_unhealthy_or_foreign_gpu(case: Case) -> None:
    """Every chosen GPU is free, healthy and not used outside a lease."""
    choice = BestEffortPolicy().choose(case.snapshot, case.request)
    assert all(case.snapshot.views[u].available for u in choice.gpus)


@IMPLIED
@given(cases())
def test_gives_exactly_the_count_including_the_required_gpus(case: Case) -> None:
    """The set has exactly `count` distinct GPUs and holds every required GPU."""
    choice = BestEffortPolicy().choose(case.snapshot, case.request)
    assert len(set(choice.gpus)) == len(choice.gpus) == case.request.count
    assert set(case.request.required) <= set(choice.gpus)


@PROPERTY
@given(cases())
def test_is_deterministic_for_the_same_snapshot(case: Case) -> None:
    """Two instances, and one instance asked twice, give the same choice."""
    first = BestEffortPolicy().choose(case.snapshot, case.request)
    again = BestEffortPolicy(cache_size=0)
    assert again.choose(case.snapshot, case.request) == first
    assert again.choose(case.snapshot, case.request) == first


@PROPERTY
@given(cases())
def test_matches_a_brute_force_over_all_subsets(case: Case) -> None:
    """Score, damage and tie-break agree with ranking every subset of up to 10 GPUs."""
    choice = BestEffortPolicy().choose(case.snapshot, case.request)
    expected = best_by_brute_force(case.snapshot, case.request)
    assert choice.score == set_score(case.topology, expected)
    assert choice.gpus == expected
    assert choice.exact


# Errors ----------------------------------------------------------------------------------------


def test_refuses_when_too_few_gpus_are_free() -> None:
    """Seven leased GPUs of eight leave no room for two."""
    topology = node("dgx-a100")
    with pytest.raises(GpusUnavailable):
        BestEffortPolicy().choose(snapshot_of(topology, range(7)), AllocationRequest(count=2))


def test_refuses_a_required_gpu_that_is_leased() -> None:
    """A required GPU that is leased is GpuBusy, not silently replaced."""
    topology = node("dgx-a100")
    request = AllocationRequest(count=2, required=(topology.gpus[3].uuid,))
    with pytest.raises(GpuBusy):
        BestEffortPolicy().choose(snapshot_of(topology, [3]), request)


def test_a_capped_search_says_it_is_not_proven() -> None:
    """A search stopped by max_search_nodes returns a valid set and says it is unproven."""
    topology = node("synthetic-32gpu")
    policy = BestEffortPolicy(max_search_nodes=2)
    choice = policy.choose(snapshot_of(topology), AllocationRequest(count=12))
    assert len(choice.gpus) == 12
    assert not choice.exact
    assert "not proven best" in choice.reason


# DGX-1 -----------------------------------------------------------------------------------------


def test_dgx1_volta_pair_is_an_nv2_pair_on_one_socket() -> None:
    """A pair on an idle DGX-1 (Volta) is 0-3: two NVLinks, one NUMA node."""
    assert pick("dgx1-volta", 2) == [0, 3]


def test_dgx1_volta_quad_is_a_whole_socket() -> None:
    """Four GPUs on an idle DGX-1 (Volta) are the quad 0-3 (9 lanes, the most any quad has)."""
    assert pick("dgx1-volta", 4) == [0, 1, 2, 3]


def test_dgx1_volta_single_gpu_completes_a_broken_pair() -> None:
    """With GPU 0 leased, a single GPU is 3 (0's NV2 partner on its socket), not an intact pair."""
    assert pick("dgx1-volta", 1, busy=(0,)) == [3]


def test_dgx1_volta_pair_does_not_split_the_intact_quad() -> None:
    """With 0 and 1 leased, a pair takes NV2 pair 2-3 of the broken quad, not one of 4-7."""
    assert pick("dgx1-volta", 2, busy=(0, 1)) == [2, 3]


def test_dgx1_pascal_pair_shares_a_pcie_switch() -> None:
    """All DGX-1 (Pascal) links are NV1; the pair that also shares a PCIe switch wins."""
    assert pick("dgx1-pascal", 2) == [0, 1]


def test_dgx1_pascal_three_gpus_stay_in_one_quad() -> None:
    """Three GPUs on a DGX-1 (Pascal) come from one fully linked quad."""
    assert pick("dgx1-pascal", 3) == [0, 1, 2]


# NVSwitch --------------------------------------------------------------------------------------


def test_dgx_a100_pair_shares_a_pcie_switch_and_numa_node() -> None:
    """Every A100 pair has NV12, so the PCIe switch pair (PXB, same NUMA node) wins."""
    assert pick("dgx-a100", 2) == [0, 1]


def test_dgx_a100_single_gpu_is_the_orphan_of_a_switch_pair() -> None:
    """With GPU 4 leased, a single GPU is 5: its switch partner is gone already."""
    assert pick("dgx-a100", 1, busy=(4,)) == [5]


def test_dgx_h100_four_gpus_stay_on_one_socket() -> None:
    """NV18 everywhere; four GPUs on one socket (NODE, one NUMA node) beat any mix."""
    assert pick("dgx-h100", 4) == [0, 1, 2, 3]


def test_dgx2_eight_gpus_are_one_half() -> None:
    """On a DGX-2 eight GPUs are one socket's PCIe tree, not a mix of both halves."""
    assert pick("dgx2", 8) in ([0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15])


def test_dgx2_pair_finishes_a_broken_quad_before_an_intact_one() -> None:
    """With 0 and 1 leased on a DGX-2, a pair is 2-3, leaving quad 4-7 whole."""
    assert pick("dgx2", 2, busy=(0, 1)) == [2, 3]


def test_dgx2_score_comes_before_damage() -> None:
    """With 0 and 2 leased, the orphans 1 and 3 (PXB) lose to a PIX pair: score decides first."""
    assert pick("dgx2", 2, busy=(0, 2)) == [4, 5]


# PCIe only -------------------------------------------------------------------------------------


def test_pcie_box_pair_is_a_pix_pair_that_keeps_the_best_quad_whole() -> None:
    """Without NVLink a PIX pair wins; of the four, 4-5 cuts the least (NODE, not PXB, links)."""
    assert pick("pcie-dual-socket-8gpu", 2) == [4, 5]


def test_pcie_box_four_gpus_prefer_cascaded_switches() -> None:
    """Socket 0's cascaded switches (PXB) beat socket 1's separate root ports (NODE)."""
    assert pick("pcie-dual-socket-8gpu", 4) == [0, 1, 2, 3]


def test_pcie_box_pair_never_crosses_sockets_while_a_socket_has_two() -> None:
    """With 0, 2 and 4 leased, a pair stays inside socket 1 (6-7 PIX) rather than cross SYS."""
    assert pick("pcie-dual-socket-8gpu", 2, busy=(0, 2, 4)) == [6, 7]


# Workstation -----------------------------------------------------------------------------------


def test_workstation_pair_is_a_bridged_pair() -> None:
    """Two GPUs on a 4-GPU workstation with NV4 bridges are a bridged pair."""
    assert pick("workstation-4gpu-nvbridge", 2) == [0, 1]


def test_workstation_single_gpu_keeps_the_intact_bridge() -> None:
    """With GPU 2 leased, a single GPU is 3, keeping bridge 0-1 whole."""
    assert pick("workstation-4gpu-nvbridge", 1, busy=(2,)) == [3]


def test_workstation_with_required_gpu_adds_its_bridge_partner() -> None:
    """A pair that must hold GPU 2 adds 3, its bridge partner."""
    assert pick("workstation-4gpu-nvbridge", 2, required=(2,)) == [2, 3]


# AMD -------------------------------------------------------------------------------------------


def test_mi210_four_gpus_are_one_xgmi_hive() -> None:
    """Four MI210s come from one Infinity Fabric hive, not across the two."""
    assert pick("amd-mi210-8gpu", 4) in ([0, 1, 2, 3], [4, 5, 6, 7])


def test_mi210_pair_after_leases_stays_in_a_hive() -> None:
    """With 0, 1, 2 leased, a pair is from hive 4-7, since GPU 3 has no XGMI partner left."""
    assert pick("amd-mi210-8gpu", 2, busy=(0, 1, 2)) == [4, 5]


def test_mi300x_four_gpus_stay_on_one_socket() -> None:
    """MI300X is a full XGMI mesh, so PCIe and NUMA decide: four GPUs from one socket."""
    assert pick("amd-mi300x-8gpu", 4) == [0, 1, 2, 3]


# Memory ----------------------------------------------------------------------------------------


def test_memory_need_excludes_gpus_that_do_not_fit() -> None:
    """GPUs with too little free memory are not candidates; an exact fit is."""
    topology = node("dgx-a100")
    total = topology.gpus[0].memory_total_bytes or 0
    live = {g.uuid: LiveState(memory_used_bytes=total - 2**30) for g in topology.gpus[:4]}
    live[topology.gpus[2].uuid] = LiveState(memory_used_bytes=total - 2**31)
    snapshot = NodeSnapshot.from_busy(topology, live=live)
    request = AllocationRequest(count=5, min_free_memory_bytes=2**31)
    choice = BestEffortPolicy().choose(snapshot, request)
    assert indices(topology, choice.gpus) == [2, 4, 5, 6, 7]
