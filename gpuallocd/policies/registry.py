"""Policies by name, from the `gpuallocd.policies` entry-point group.

Built-in policies register there exactly as third-party ones do. An entry point names a
class (or any callable) that takes keyword options and returns a `Policy`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib.metadata import entry_points
from typing import Any, cast

from gpuallocd.errors import UnknownPolicy
from gpuallocd.policies.base import Policy

__all__ = ["ENTRY_POINT_GROUP", "available_policies", "get_policy", "policy_factory"]

ENTRY_POINT_GROUP = "gpuallocd.policies"
PolicyFactory = Callable[..., Policy]


@cache
def _factories() -> dict[str, PolicyFactory]:
    found: dict[str, PolicyFactory] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry.name, cast(PolicyFactory, entry.load()))
    return found


def available_policies() -> list[str]:
    """The names of every installed policy."""
    return sorted(_factories())


def policy_factory(name: str) -> PolicyFactory:
    try:
        return _factories()[name]
    except KeyError:
        known = ", ".join(available_policies()) or "none installed"
        raise UnknownPolicy(f"unknown policy {name!r}; known: {known}", policy=name) from None


def get_policy(name: str, **options: Any) -> Policy:
    """A policy instance by its registered name."""
    return policy_factory(name)(**options)
