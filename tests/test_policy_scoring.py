"""Scoring: NVLink lanes first, then the PCIe path, then NUMA, packed exactly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuallocd.model import Gpu, Link, PcieLevel
from gpuallocd.policies.scoring import (
    LANE_WEIGHT,
    PCIE_WEIGHT,
    SetScore,
    pair_breakdown,
    pair_score,
    set_breakdown,
    set_score,
    weight_matrix,
)
from tests.test_policy_support import node

A = Gpu(uuid="GPU-a", index=0, numa_node=0)
B = Gpu(uuid="GPU-b", index=1, numa_node=0)
C = Gpu(uuid="GPU-c", index=2, numa_node=1)


def test_one_lane_beats_the_best_pcie_path_and_numa() -> None:
    """NV1 across sockets outscores PIX on one NUMA node."""
    assert pair_score(Link(nvlinks=1, pcie=PcieLevel.SYS), A, C) > pair_score(
        Link(pcie=PcieLevel.PIX), A, B
    )


def test_pcie_levels_rank_pix_pxb_phb_node_sys() -> None:
    """PIX > PXB > PHB > NODE > SYS for the same GPUs."""
    scores = [pair_score(Link(pcie=level), A, C) for level in PcieLevel]
    assert scores == sorted(scores)
    assert len(set(scores)) == len(scores)


def test_same_numa_node_breaks_a_pcie_tie() -> None:
    """Two SYS pairs: the one on one NUMA node scores one more."""
    assert (
        pair_score(Link(pcie=PcieLevel.SYS), A, B) == pair_score(Link(pcie=PcieLevel.SYS), A, C) + 1
    )


def test_xgmi_links_count_as_lanes() -> None:
    """An AMD XGMI link scores like an NVLink lane."""
    assert pair_score(Link(xgmi=2), A, B) == pair_score(Link(nvlinks=2), A, B)


def test_hidden_pcie_path_of_an_nvlink_pair_counts_as_node_on_one_numa_node() -> None:
    """NV# hides the PCIe path: on one NUMA node it counts as NODE, across as SYS."""
    assert pair_breakdown(Link(nvlinks=2), A, B).pcie_points == 1
    assert pair_breakdown(Link(nvlinks=2), A, C).pcie_points == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 18), st.integers(0, 4), st.booleans()), max_size=9870),
)
def test_packing_is_lexicographic_and_unpacks_exactly(pairs: list[tuple[int, int, bool]]) -> None:
    """Summed tiers of up to 9,870 pairs (141 GPUs) unpack to the same tiers."""
    total = SetScore(
        lanes=sum(p[0] for p in pairs),
        pcie_points=sum(p[1] for p in pairs),
        numa_pairs=sum(p[2] for p in pairs),
    )
    assert SetScore.unpack(total.value) == total


def test_set_score_is_the_sum_of_pair_scores() -> None:
    """A DGX A100 pair scores NV12 with PXB on one NUMA node."""
    topology = node("dgx-a100")
    uuids = [g.uuid for g in topology.gpus[:2]]
    tiers = set_breakdown(topology, uuids)
    assert (tiers.lanes, tiers.pcie_points, tiers.numa_pairs) == (12, 3, 1)
    assert set_score(topology, uuids) == 12 * LANE_WEIGHT + 3 * PCIE_WEIGHT + 1


def test_weight_matrix_agrees_with_set_score() -> None:
    """The matrix the search uses gives the same set values as set_score."""
    topology = node("dgx1-volta")
    matrix = weight_matrix(topology)
    chosen = [0, 3, 4, 7]
    assert matrix.set_value(chosen) == set_score(topology, [topology.gpus[i].uuid for i in chosen])
