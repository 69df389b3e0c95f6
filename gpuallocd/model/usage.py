"""Accounting: how much each user held and waited over a window of time.

Pure. A lease counts for the part of its life inside the window, times its GPUs; an active
lease counts up to the window's end. The ledger adds it up from each user's running totals
(ledger/totals.py); fair share's decayed use reads lease spans (`LeaseSpan`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpuallocd.model.energy import JOULES_PER_KWH

__all__ = [
    "MAX_DAYS",
    "LeaseSpan",
    "UserUsage",
    "day_bounds",
    "local_midnights",
    "usage_by_group",
]


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
    preemptible_gpu_hours: float = 0.0  # the part of `gpu_hours` held in preemptible leases

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
            "preemptible_gpu_hours": self.preemptible_gpu_hours,
        }


def local_midnights(days: int, now: float) -> list[float]:
    """Local midnights of the last `days` days, today's last, and the next midnight: the
    bounds of `days` calendar days as the box's clock shows them."""
    today = time.localtime(now)
    return [
        time.mktime((today.tm_year, today.tm_mon, today.tm_mday - back, 0, 0, 0, 0, 0, -1))
        for back in range(days - 1, -2, -1)
    ]


MAX_DAYS = 366  # the longest per-day report: a year


def day_bounds(since: float, until: float) -> list[float]:
    """The bounds of each local calendar day from the day of `since` to `until`, the first
    starting at `since` and the last cut at `until`; the latest `MAX_DAYS` days at most."""
    since = min(max(since, until - (MAX_DAYS + 1) * 86400.0), until)  # older days never shown
    first_midnight = local_midnights(1, since)[0]
    days = min(MAX_DAYS, max(1, math.ceil((until - first_midnight) / 86400)))
    bounds = local_midnights(days, until)
    bounds[0], bounds[-1] = max(bounds[0], since), until
    return bounds


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
