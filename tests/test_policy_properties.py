"""What every general-purpose policy must hold, on random nodes and requests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from gpuallocd.errors import CountExceedsNode, InvalidRequest, UnknownGpu
from gpuallocd.policies import get_policy
from gpuallocd.policies.base import AllocationRequest
from gpuallocd.policies.scoring import set_score
from tests.test_policy_support import Case, cases, node, snapshot_of

GENERAL = ["best-effort", "best-fit", "packed", "random", "simple", "spread", "worst-fit"]
PROPERTY = settings(max_examples=40, deadline=None)


@pytest.mark.parametrize("name", GENERAL)
@PROPERTY
@given(case=cases(max_gpus=8))
def test_a_valid_choice_every_time(name: str, case: Case) -> None:
    """Only usable GPUs, exactly the count, the required ones included, the same twice."""
    choice = get_policy(name).choose(case.snapshot, case.request)
    assert all(case.snapshot.views[u].available for u in choice.gpus)
    assert len(set(choice.gpus)) == case.request.count
    assert set(case.request.required) <= set(choice.gpus)
    assert get_policy(name).choose(case.snapshot, case.request).gpus == choice.gpus


@pytest.mark.parametrize("name", [n for n in GENERAL if n != "simple"])
@PROPERTY
@given(case=cases(max_gpus=8))
def test_the_score_is_the_sets_topology_score(name: str, case: Case) -> None:
    """Choice.score is the set score of the chosen GPUs."""
    choice = get_policy(name).choose(case.snapshot, case.request)
    assert choice.score == set_score(case.topology, choice.gpus)


@pytest.mark.parametrize("name", GENERAL)
def test_bad_requests_are_refused_before_choosing(name: str) -> None:
    """Zero GPUs, a count below the required GPUs, an unknown GPU, more than the node has."""
    topology = node("workstation-4gpu-nvbridge")
    state = snapshot_of(topology)
    policy = get_policy(name)
    first = topology.gpus[0].uuid
    with pytest.raises(InvalidRequest):
        policy.choose(state, AllocationRequest(count=0))
    with pytest.raises(InvalidRequest):
        policy.choose(state, AllocationRequest(count=1, required=(first, topology.gpus[1].uuid)))
    with pytest.raises(InvalidRequest):
        policy.choose(state, AllocationRequest(count=2, required=(first, first)))
    with pytest.raises(UnknownGpu):
        policy.choose(state, AllocationRequest(count=1, required=("GPU-nope",)))
    with pytest.raises(CountExceedsNode):
        policy.choose(state, AllocationRequest(count=5))
