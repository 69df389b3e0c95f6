"""static-dgx1 and static-dgx2: only the fixed DGX sets, and a clear refusal elsewhere."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpuallocd.errors import GpusUnavailable, PolicyNotApplicable
from gpuallocd.policies.base import AllocationRequest, Policy
from gpuallocd.policies.static_dgx import StaticDgx1Policy, StaticDgx2Policy, dgx1_generation
from tests.test_policy_support import indices, node, snapshot_of


def pick(
    policy: Policy, name: str, count: int, busy: Sequence[int] = (), required: Sequence[int] = ()
) -> list[int]:
    topology = node(name)
    by_index = topology.by_index()
    request = AllocationRequest(count=count, required=tuple(by_index[i].uuid for i in required))
    return indices(topology, policy.choose(snapshot_of(topology, busy), request).gpus)


def test_generation_is_detected_from_the_links() -> None:
    """The Pascal file (all NV1) is Pascal; the Volta `nvidia-smi` text (NV2 pairs) is Volta."""
    assert dgx1_generation(node("dgx1-pascal")) == "pascal"
    assert dgx1_generation(node("dgx1-volta")) == "volta"


@pytest.mark.parametrize(("name", "pair"), [("dgx1-pascal", [0, 2]), ("dgx1-volta", [0, 3])])
def test_dgx1_pairs_are_the_generations_pairs(name: str, pair: list[int]) -> None:
    """A pair on an idle DGX-1 is the first pair of its generation's table."""
    assert pick(StaticDgx1Policy(), name, 2) == pair


def test_dgx1_pair_comes_from_the_broken_quad() -> None:
    """With GPU 0 leased on a DGX-1 (Volta), the pair is 1-2, leaving quad 4-7 whole."""
    assert pick(StaticDgx1Policy(), "dgx1-volta", 2, busy=[0]) == [1, 2]


def test_dgx1_quad_and_all() -> None:
    """Four GPUs are a quad; eight are all of them."""
    assert pick(StaticDgx1Policy(), "dgx1-volta", 4, busy=[0]) == [4, 5, 6, 7]
    assert pick(StaticDgx1Policy(), "dgx1-volta", 8) == list(range(8))


def test_dgx1_required_gpu_selects_its_set() -> None:
    """A pair that must hold GPU 6 on a DGX-1 (Volta) is 5-6."""
    assert pick(StaticDgx1Policy(), "dgx1-volta", 2, required=[6]) == [5, 6]


def test_dgx1_generation_option_overrides_detection() -> None:
    """generation='pascal' on the Volta box hands out the Pascal pairs."""
    assert pick(StaticDgx1Policy(generation="pascal"), "dgx1-volta", 2) == [0, 2]


def test_dgx1_rejects_an_unknown_generation() -> None:
    """Only 'pascal' and 'volta' exist."""
    with pytest.raises(ValueError, match="generation"):
        StaticDgx1Policy(generation="ampere")


def test_dgx1_refuses_other_sizes() -> None:
    """Three GPUs are not a DGX-1 set."""
    with pytest.raises(PolicyNotApplicable, match="not 3"):
        pick(StaticDgx1Policy(), "dgx1-volta", 3)


@pytest.mark.parametrize("name", ["dgx-a100", "dgx2", "workstation-4gpu-nvbridge"])
def test_dgx1_refuses_other_machines(name: str) -> None:
    """An NVSwitch box, a DGX-2 and a workstation are not DGX-1s."""
    with pytest.raises(PolicyNotApplicable):
        pick(StaticDgx1Policy(), name, 2)


def test_dgx1_refuses_when_no_whole_set_is_free() -> None:
    """With 0 and 5 leased no Volta quad is whole."""
    with pytest.raises(GpusUnavailable):
        pick(StaticDgx1Policy(), "dgx1-volta", 4, busy=[0, 5])


def test_dgx2_sets() -> None:
    """DGX-2: pairs 2k,2k+1, quads, halves, all sixteen."""
    policy = StaticDgx2Policy()
    assert pick(policy, "dgx2", 2, busy=[0]) == [2, 3]
    assert pick(policy, "dgx2", 4) == [0, 1, 2, 3]
    assert pick(policy, "dgx2", 8, busy=[0]) == list(range(8, 16))
    assert pick(policy, "dgx2", 16) == list(range(16))


def test_dgx2_refuses_other_sizes_and_machines() -> None:
    """Six GPUs, or a DGX A100, do not fit the DGX-2 table."""
    with pytest.raises(PolicyNotApplicable, match="not 6"):
        pick(StaticDgx2Policy(), "dgx2", 6)
    with pytest.raises(PolicyNotApplicable):
        pick(StaticDgx2Policy(), "dgx-a100", 2)
