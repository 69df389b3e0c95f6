"""`/v1/usage?user=X`: the window's figures of X alone, the reservations held for X (or for
a group X is in, as the reservation itself admits members) and X's fair-share figure, never
everyone's."""

from __future__ import annotations

import pwd
from collections.abc import Mapping, Sequence
from typing import Any

from gpuallocd.allocator.site.reservation_board import caller_of_uid

__all__ = ["for_user"]


def _holders(user: str) -> frozenset[str]:
    """How a reservation's `for` names `user` (a name or a uid): `alice`, `group G`."""
    try:
        uid = int(user) if user.isdigit() else pwd.getpwnam(user).pw_uid
    except (KeyError, OverflowError):
        return frozenset({user})
    caller = caller_of_uid(uid)
    return frozenset({caller.user} | {f"group {g}" for g in caller.groups})


def for_user(
    user: str, fair_share: Mapping[str, float], reservations: Sequence[dict[str, Any]]
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """`fair_share` and `reservations` cut to what concerns `user` (a name or a uid)."""
    holders = _holders(user)
    mine = {name: value for name, value in fair_share.items() if name in holders}
    return mine, [r for r in reservations if r.get("for") in holders]
