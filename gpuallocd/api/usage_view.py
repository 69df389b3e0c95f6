"""`/v1/usage?user=X`: the window's figures of X alone, the reservations held for X (or for
a group X is in, as the reservation itself admits members) and X's fair-share figure, never
everyone's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuallocd.api.peercred import caller_named
from gpuallocd.errors import InvalidRequest

__all__ = ["for_user"]


def _holders(user: str) -> frozenset[str]:
    """How a reservation's `for` names `user` (a name or a uid): `alice`, `group G`."""
    try:
        caller = caller_named(user)
    except InvalidRequest:
        return frozenset({user})  # gone from this machine: only its own name
    return frozenset({caller.user} | {f"group {g}" for g in caller.groups})


def for_user(
    user: str, fair_share: Mapping[str, float], reservations: Sequence[dict[str, Any]]
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """`fair_share` and `reservations` cut to what concerns `user` (a name or a uid)."""
    holders = _holders(user)
    mine = {name: value for name, value in fair_share.items() if name in holders}
    return mine, [r for r in reservations if r.get("for") in holders]
