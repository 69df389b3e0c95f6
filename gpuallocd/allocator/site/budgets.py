"""Budgets: the GPU-hours and kWh a user may use per rolling day, week and month.

A budget is a field of `Limits` declared with `budget_field` (docs/limits.md): set for
everyone, a group or a user like every limit, checked at each grant. A request is refused
(`quota_exceeded`) while the user's use in the window is at or over the budget, naming the
budget, the use and when enough of it will have left the window (if nothing more is used). A
running lease is never cut: budgets are checked at grants only. The use comes from the user's
running totals in the ledger (ledger/totals.py): GPU-hours of their leases (active ones up to
now) and kWh of their energy readings, leased and unleased (docs/accounting.md), each window
two points of the totals, whatever the history holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any

from gpuallocd.errors import QuotaExceeded
from gpuallocd.ledger.totals import Totals
from gpuallocd.model.energy import JOULES_PER_KWH

__all__ = [
    "LONGEST_WINDOW",
    "WINDOWS",
    "TotalsUse",
    "budget_field",
    "check_budgets",
    "frees_at",
    "use_in_window",
]

WINDOWS = {"day": 86400.0, "week": 7 * 86400.0, "month": 30 * 86400.0}
LONGEST_WINDOW = max(WINDOWS.values())
UNITS = {"gpu_hours": "GPU-hours", "kwh": "kWh"}
PRECISION_SECONDS = 1.0  # how close `frees_at` gets


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


class TotalsUse:
    """A user's use as the running totals give it at `now`, where nothing more is used after
    now: an active lease counts up to now (the budget says what was used, not what will be)."""

    def __init__(self, totals_at: Callable[[float], Totals], now: float) -> None:
        self.now = now
        self._totals_at = totals_at
        self._now = totals_at(now)

    def _at(self, when: float) -> Totals:
        return self._now if when >= self.now else self._totals_at(when)

    def use(self, measure: str, start: float, end: float) -> float:
        """GPU-hours or kWh used inside [start, end]: two points of the totals."""
        used = self._at(end).since(self._at(start))
        if measure == "kwh":
            return used.all_joules / JOULES_PER_KWH
        return used.gpu_seconds / 3600.0


def use_in_window(found: TotalsUse, measure: str, window: float) -> float:
    return found.use(measure, found.now - window, found.now)


def frees_at(found: TotalsUse, measure: str, window: float, budget: float) -> float:
    """When the use in the window falls below `budget`, if nothing more is used (to the
    second: about twenty reads of the totals for a month)."""
    low, high = found.now, found.now + window
    while high - low > PRECISION_SECONDS:  # the use in the window only falls as it slides
        middle = (low + high) / 2
        if found.use(measure, middle - window, middle) < budget:
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
    use: Callable[[], TotalsUse],
) -> None:
    """Refuse (QuotaExceeded) where the user's use in a budget's window is at or over it;
    `use()` is asked only where a budget applies."""
    applied = {name: value_of(name) for name in budgets}
    set_ = {name: value for name, value in applied.items() if value is not None}
    if not set_:
        return
    found = use()
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
