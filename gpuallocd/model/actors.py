"""Who did a lease transition, in words: the user by name (never `uid:1022`), and a change
the daemon made by one of its rules under that rule's name (`idle-reclaim`), not as root."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["IDLE_RECLAIM", "actor_name", "rule_of"]

IDLE_RECLAIM = "idle-reclaim"
# The detail each daemon rule writes (allocator/queue/reclaim.py), and the name it is shown by.
RULES = (("idle reclaim:", IDLE_RECLAIM),)


def rule_of(actor_uid: int, detail: str | None) -> str | None:
    """The daemon rule that made a change recorded as root's with `detail`; None if none."""
    if actor_uid != 0 or not detail:
        return None
    return next((rule for prefix, rule in RULES if detail.startswith(prefix)), None)


def actor_name(actor_uid: int, detail: str | None, user_name: Callable[[int], str]) -> str:
    """`alice` (`user_name` of the uid), or `idle-reclaim` for a revoke the daemon's idle
    reclaim made (as root)."""
    return rule_of(actor_uid, detail) or user_name(actor_uid)
