"""Who did a lease transition, in words: the user by name (never `uid:1022`), and a change
the daemon made by one of its rules under that rule's name (`idle-reclaim`), not as root."""

from __future__ import annotations

import functools
import pwd

__all__ = ["IDLE_RECLAIM", "actor_name", "rule_of", "user_name"]

IDLE_RECLAIM = "idle-reclaim"
# The detail each daemon rule writes (allocator/queue/reclaim.py), and the name it is shown by.
RULES = (("idle reclaim:", IDLE_RECLAIM),)


@functools.lru_cache(maxsize=256)
def user_name(uid: int) -> str:
    """The user's name on this node; the uid as text where it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def rule_of(actor_uid: int, detail: str | None) -> str | None:
    """The daemon rule that made a change recorded as root's with `detail`; None if none."""
    if actor_uid != 0 or not detail:
        return None
    return next((rule for prefix, rule in RULES if detail.startswith(prefix)), None)


def actor_name(actor_uid: int, detail: str | None) -> str:
    """`alice`, or `idle-reclaim` for a revoke the daemon's idle reclaim made (as root)."""
    return rule_of(actor_uid, detail) or user_name(actor_uid)
