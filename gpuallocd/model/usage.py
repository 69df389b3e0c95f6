"""Accounting: how much each user held and waited over a window of time, from lease spans.

Pure: the ledger gives the spans, these functions add them up. A lease counts for the part
of its life inside the window, times its GPUs; an active lease counts up to the window's end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpuallocd.model.energy import JOULES_PER_KWH

__all__ = ["LeaseSpan", "UserUsage", "gpu_seconds", "usage_by_group", "usage_by_user"]


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
    energy_joules: float = 0.0  # drawn under leases (docs/accounting.md)
    energy_estimate: bool = False  # some of it estimated (shares, MIG instances)
    unleased_gpu_hours: float = 0.0  # GPU time of processes on GPUs the user held no lease on
    unleased_energy_joules: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "user": self.user,
            "gpu_hours": self.gpu_hours,
            "leases": self.leases,
            "waiting_seconds": self.waiting_seconds,
            "energy_kwh": self.energy_joules / JOULES_PER_KWH,
            "energy_joules": self.energy_joules,
            "energy_estimate": self.energy_estimate,
            "unleased_gpu_hours": self.unleased_gpu_hours,
            "unleased_energy_kwh": self.unleased_energy_joules / JOULES_PER_KWH,
        }


def gpu_seconds(spans: Iterable[LeaseSpan], since: float, until: float) -> float:
    """GPU-seconds held by these spans inside [since, until]."""
    return sum(span.gpus * span.seconds_within(since, until) for span in spans)


def usage_by_user(spans: Iterable[LeaseSpan], since: float, until: float) -> list[UserUsage]:
    """Each user's use inside [since, until], most GPU-hours first.

    A lease counts as granted (and its waiting time counts) where it was created inside the
    window; its GPU-hours count for the part of its life inside the window.
    """
    totals: dict[int, list[Any]] = {}
    for span in spans:
        entry = totals.setdefault(span.owner_uid, [span.owner_name, 0.0, 0, 0.0])
        entry[1] += span.gpus * span.seconds_within(since, until)
        if since <= span.created_at < until:
            entry[2] += 1
            entry[3] += span.waited_seconds
    found = [
        UserUsage(uid, name, seconds / 3600.0, leases, waited)
        for uid, (name, seconds, leases, waited) in totals.items()
    ]
    return sorted(found, key=lambda u: (-u.gpu_hours, u.user))


def usage_by_group(
    users: Iterable[UserUsage], group_of: Callable[[int], str]
) -> list[dict[str, Any]]:
    """Each group's use: its members' (each user in their primary group `group_of(uid)`)
    GPU-hours and kWh added up, leased and unleased; most kWh first."""
    totals: dict[str, dict[str, Any]] = {}
    for user in users:
        group = group_of(user.uid)
        entry = totals.setdefault(
            group,
            {
                "group": group,
                "users": 0,
                "gpu_hours": 0.0,
                "energy_kwh": 0.0,
                "energy_estimate": False,
                "unleased_gpu_hours": 0.0,
                "unleased_energy_kwh": 0.0,
            },
        )
        entry["users"] += 1
        entry["gpu_hours"] += user.gpu_hours
        entry["energy_kwh"] += user.energy_joules / JOULES_PER_KWH
        entry["energy_estimate"] = entry["energy_estimate"] or user.energy_estimate
        entry["unleased_gpu_hours"] += user.unleased_gpu_hours
        entry["unleased_energy_kwh"] += user.unleased_energy_joules / JOULES_PER_KWH
    return sorted(totals.values(), key=lambda g: (-g["energy_kwh"], -g["gpu_hours"], g["group"]))
