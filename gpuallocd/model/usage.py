"""Accounting: how much each user held and waited over a window of time, from lease spans.

Pure: the ledger gives the spans, these functions add them up. A lease counts for the part
of its life inside the window, times its GPUs; an active lease counts up to the window's end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["LeaseSpan", "UserUsage", "gpu_seconds"]


@dataclass(frozen=True, slots=True)
class LeaseSpan:
    """One lease as accounting sees it: who, how many GPUs, from when to when."""

    owner_uid: int
    owner_name: str
    gpus: float  # the lease's GPU weight: 1 per whole GPU
    created_at: float
    ended_at: float | None  # None: still active
    waited_seconds: float = 0.0

    def seconds_within(self, since: float, until: float) -> float:
        """How long the lease was held inside [since, until]."""
        end = until if self.ended_at is None else min(self.ended_at, until)
        return max(0.0, end - max(self.created_at, since))


@dataclass(frozen=True, slots=True)
class UserUsage:
    """One user's use over a window: GPU-hours held, leases granted, time spent waiting."""

    uid: int
    user: str
    gpu_hours: float
    leases: int
    waiting_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "user": self.user,
            "gpu_hours": self.gpu_hours,
            "leases": self.leases,
            "waiting_seconds": self.waiting_seconds,
        }


def gpu_seconds(spans: Iterable[LeaseSpan], since: float, until: float) -> float:
    """GPU-seconds held by these spans inside [since, until]."""
    return sum(span.gpus * span.seconds_within(since, until) for span in spans)
