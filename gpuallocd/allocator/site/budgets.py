"""Budgets: the GPU-hours and kWh a user may use per rolling day, week and month.

A budget is a field of `Limits` declared with `budget_field` (docs/limits.md): set for
everyone, a group or a user like every limit, checked at each grant. A request is refused
(`quota_exceeded`) while the user's use in the window is at or over the budget, naming the
budget, the use and when enough of it will have left the window (if nothing more is used). A
running lease is never cut: budgets are checked at grants only. GPU-hours come from the
ledger's leases (active ones up to now), kWh from its energy readings (docs/accounting.md).
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import Any

from gpuallocd.errors import QuotaExceeded
from gpuallocd.model import LeaseSpan, gpu_seconds
from gpuallocd.model.energy import JOULES_PER_KWH

__all__ = ["WINDOWS", "budget_field", "check_budgets", "frees_at", "use_in_window"]

WINDOWS = {"day": 86400.0, "week": 7 * 86400.0, "month": 30 * 86400.0}
UNITS = {"gpu_hours": "GPU-hours", "kwh": "kWh"}


def budget_field(measure: str, window: str) -> Any:
    """A `Limits` field for a budget of `measure` (gpu_hours, kwh) per rolling `window`."""
    meaning = f"{UNITS[measure]} a user may use in any {window} ({WINDOWS[window]:g} s)"
    metadata = {
        "limit": True,
        "whole": False,
        "minimum": 0.0,
        "meaning": meaning,
        "budget": (measure, WINDOWS[window]),
    }
    return field(default=None, metadata=metadata)


class Readings:
    """A user's use as it happened: lease spans (GPU-hours) and energy readings (kWh)."""

    def __init__(
        self, spans: Iterable[LeaseSpan], energy: Iterable[tuple[float, float]], now: float
    ) -> None:
        self.now = now
        # A lease still active counts up to now: the budget says what was used, not what will be.
        self.spans = [s if s.ended_at is not None else _ended(s, now) for s in spans]
        readings = sorted(energy)
        self._times = [at for at, _ in readings]
        self._joules = list(itertools.accumulate((j for _, j in readings), initial=0.0))

    def use(self, measure: str, start: float, end: float) -> float:
        """GPU-hours or kWh used inside [start, end] (kWh in O(log n): a month of readings
        every minute is tens of thousands of rows)."""
        if measure == "kwh":
            low = bisect.bisect_right(self._times, start)
            high = bisect.bisect_right(self._times, end)
            return (self._joules[high] - self._joules[low]) / JOULES_PER_KWH
        return gpu_seconds(self.spans, start, end) / 3600.0


def _ended(span: LeaseSpan, now: float) -> LeaseSpan:
    return LeaseSpan(
        span.owner_uid, span.owner_name, span.gpus, span.created_at, now, span.waited_seconds
    )


def use_in_window(readings: Readings, measure: str, window: float) -> float:
    return readings.use(measure, readings.now - window, readings.now)


def frees_at(readings: Readings, measure: str, window: float, budget: float) -> float:
    """When the use in the window falls below `budget`, if nothing more is used."""
    low, high = readings.now, readings.now + window
    for _ in range(40):  # use in the window only falls as it slides past now (to ~1 s)
        middle = (low + high) / 2
        if readings.use(measure, middle - window, middle) < budget:
            high = middle
        else:
            low = middle
    return high


def _when(at: float, now: float) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))
    minutes = max(1, round((at - now) / 60))
    return f"{stamp} (in {minutes // 60}h{minutes % 60:02d}m)"


def check_budgets(
    budgets: Mapping[str, tuple[str, float]],
    value_of: Callable[[str], float | None],
    source_of: Callable[[str], str],
    user: str,
    readings: Callable[[float], Readings],
) -> None:
    """Refuse (QuotaExceeded) where the user's use in a budget's window is at or over it;
    `readings(since)` reads the use once, over the longest window that applies."""
    applied = {name: value_of(name) for name in budgets}
    set_ = {name: value for name, value in applied.items() if value is not None}
    if not set_:
        return
    found = readings(max(budgets[name][1] for name in set_))
    for name, budget in sorted(set_.items()):
        measure, window = budgets[name]
        used = use_in_window(found, measure, window)
        if used >= budget:
            free = frees_at(found, measure, window, budget)
            raise QuotaExceeded(
                f"{user} used {used:.3f} {UNITS[measure]} of {budget:g} in the last "
                f"{window / 86400:g} day(s): {name} = {budget:g} for {user} ({source_of(name)}); "
                f"enough frees up at {_when(free, found.now)} if nothing more is used",
                limit=name,
                value=budget,
                current=used,
                frees_at=free,
            )
