"""Advance reservations: GPUs promised to a user or a group for a window of time.

From `start_at` to `end_at` the reservation's GPUs go only to its members. Before it, anyone
may lease them whose lease ends by `start_at` (backfill). Pure values and rules; the
allocator keeps the board (`allocator/site/reservation_board.py`), the ledger the record.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from gpuallocd.model.lease import Caller

__all__ = ["AdvanceReservation", "ReservationEvent", "ReservationRecord", "ReservationState"]


class ReservationState(str, enum.Enum):
    SCHEDULED = "scheduled"  # its start is ahead
    ACTIVE = "active"
    ENDED = "ended"
    CANCELLED = "cancelled"


class ReservationEvent(str, enum.Enum):
    CREATED = "created"
    STARTED = "started"
    ENDED = "ended"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class AdvanceReservation:
    """GPUs (UUIDs) held for `user` or for the members of `group` in [start_at, end_at)."""

    id: str
    gpus: tuple[str, ...]
    start_at: float
    end_at: float
    user: str | None
    group: str | None
    reason: str
    by_uid: int
    by_user: str
    created_at: float
    cancelled_at: float | None = None

    @property
    def holder(self) -> str:
        """Whom it is for, in words: `alice` or `group students`."""
        return self.user if self.user is not None else f"group {self.group}"

    def state(self, now: float) -> ReservationState:
        if self.cancelled_at is not None:
            return ReservationState.CANCELLED
        if now >= self.end_at:
            return ReservationState.ENDED
        return ReservationState.ACTIVE if now >= self.start_at else ReservationState.SCHEDULED

    def live(self, now: float) -> bool:
        """Still to come or running: it can hold GPUs from someone."""
        return self.cancelled_at is None and now < self.end_at

    def admits(self, caller: Caller) -> bool:
        """Whether `caller` is one of its members."""
        if self.user is not None:
            return caller.user == self.user
        return self.group is not None and self.group in caller.groups

    def overlaps(self, start: float, end: float) -> bool:
        """Whether [start, end) meets its window."""
        return self.cancelled_at is None and start < self.end_at and end > self.start_at

    def holds_from(self, caller: Caller, now: float, ttl_seconds: float) -> bool:
        """Whether a lease of `caller` from now for `ttl_seconds` may not take its GPUs."""
        return not self.admits(caller) and self.overlaps(now, now + ttl_seconds)

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "gpus": list(self.gpus),
            "start_at": self.start_at,
            "end_at": self.end_at,
            "user": self.user,
            "group": self.group,
            "for": self.holder,
            "reason": self.reason,
            "by": {"uid": self.by_uid, "user": self.by_user},
            "created_at": self.created_at,
            "cancelled_at": self.cancelled_at,
            "state": self.state(now).value,
        }


@dataclass(frozen=True, slots=True)
class ReservationRecord:
    """One event of a reservation's life as the ledger keeps it."""

    seq: int
    reservation_id: str
    event: ReservationEvent
    actor_uid: int
    at: float
    detail: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "reservation_id": self.reservation_id,
            "event": self.event.value,
            "actor_uid": self.actor_uid,
            "at": self.at,
            "detail": self.detail,
        }
