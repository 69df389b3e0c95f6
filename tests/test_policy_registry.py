"""Every policy is found by name through the entry-point group, like a third-party one."""

from __future__ import annotations

import inspect

import pytest

from gpuallocd.errors import UnknownPolicy
from gpuallocd.policies import Policy, available_policies, get_policy
from gpuallocd.policies.registry import policy_factory

BUILT_IN = [
    "best-effort",
    "best-fit",
    "packed",
    "random",
    "simple",
    "spread",
    "static-dgx1",
    "static-dgx2",
    "worst-fit",
]


def test_every_built_in_policy_is_registered() -> None:
    """The nine built-in policies are installed entry points."""
    assert set(BUILT_IN) <= set(available_policies())


@pytest.mark.parametrize("name", BUILT_IN)
def test_each_policy_is_a_policy_named_as_registered(name: str) -> None:
    """get_policy(name) builds a Policy whose name is the registered name."""
    policy = get_policy(name)
    assert isinstance(policy, Policy)
    assert policy.name == name


@pytest.mark.parametrize("name", BUILT_IN)
def test_options_are_keyword_only_and_optional(name: str) -> None:
    """Every option of every policy is keyword-only with a default."""
    factory = policy_factory(name)
    for parameter in list(inspect.signature(factory).parameters.values()):
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
        assert parameter.default is not inspect.Parameter.empty


def test_options_reach_the_policy() -> None:
    """get_policy passes keyword options through."""
    assert get_policy("random", seed=9).seed == 9  # type: ignore[attr-defined]


def test_an_unknown_name_is_unknown_policy() -> None:
    """A name that is not installed fails with UnknownPolicy listing the known ones."""
    with pytest.raises(UnknownPolicy, match="best-effort"):
        get_policy("no-such-policy")
