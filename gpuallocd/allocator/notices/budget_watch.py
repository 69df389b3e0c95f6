"""Budgets at 80 % and 100 %: when to look at a user's use again, and what to tell them.

A budget is a rolling window (allocator/site/budgets.py), so use rises while a lease runs and
falls as old use slides out. Nothing scans users: a user's use is read when one of their leases
begins or ends (the moment the rate changes), and again when, at the rate they hold GPUs now,
it would reach the next level (never sooner than a minute, at least every `RECHECK_SECONDS`
while they hold leases). Only users a budget applies to are read at all.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from gpuallocd.allocator.site.budgets import UNITS, use_in_window
from gpuallocd.allocator.site.limits import BUDGETS, gpus_held
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.site.reservation_board import caller_of_uid
from gpuallocd.model import Lease
from gpuallocd.model.notice import Notice, budget_notice

__all__ = ["LEVELS", "BudgetWatch"]

LEVELS = (80, 100)
MIN_RECHECK_SECONDS = 60.0
RECHECK_SECONDS = 3600.0  # kWh (no rate to project from) and long projections


class BudgetWatch:
    """When each watched user's use is read next (wall clock)."""

    def __init__(self, quota: Quota, clock: Callable[[], float]) -> None:
        self._quota = quota
        self._clock = clock
        self._next: dict[int, float] = {}
        self._heap: list[tuple[float, int]] = []

    def touched(self, uid: int) -> None:
        """One of `uid`'s leases began or ended: read their use at the next tick."""
        if self._budgets_of(uid):
            self._schedule(uid, self._clock())

    def due(self) -> list[int]:
        now = self._clock()
        found: set[int] = set()
        while self._heap and self._heap[0][0] <= now:
            at, uid = heapq.heappop(self._heap)
            if self._next.get(uid) == at:
                del self._next[uid]
                found.add(uid)
        return sorted(found)

    def check(self, uid: int, active: Iterable[Lease]) -> list[Notice]:
        """The levels `uid` has reached (each told once per window, by its key); schedules
        the next look while they hold leases."""
        budgets = self._budgets_of(uid)
        if not budgets:
            return []
        now = self._clock()
        caller = caller_of_uid(uid)
        readings = self._quota.budget_use(uid)
        rate = gpus_held(active, uid)  # GPU-hours per hour, now
        notices: list[Notice] = []
        soonest = RECHECK_SECONDS if rate > 0 else None
        for name, value in sorted(budgets.items()):
            measure, window = BUDGETS[name]
            used = use_in_window(readings, measure, window)
            for level in LEVELS:
                mark = value * level / 100.0
                if used >= mark:
                    notices.append(
                        budget_notice(
                            uid,
                            caller.user,
                            budget=name,
                            level=level,
                            used=used,
                            value=value,
                            unit=UNITS[measure],
                            slot=int(now // window),
                            now=now,
                        )
                    )
                elif rate > 0 and measure == "gpu_hours" and soonest is not None:
                    soonest = min(soonest, (mark - used) / rate * 3600.0)
                    break
        if soonest is not None:
            self._schedule(uid, now + max(MIN_RECHECK_SECONDS, soonest))
        return notices

    def _budgets_of(self, uid: int) -> dict[str, float]:
        applied = self._quota.applied(caller_of_uid(uid))
        found = {name: applied.value(name) for name in BUDGETS}
        return {name: float(v) for name, v in found.items() if v is not None and v > 0}

    def _schedule(self, uid: int, at: float) -> None:
        if uid in self._next and self._next[uid] <= at:
            return
        self._next[uid] = at
        heapq.heappush(self._heap, (at, uid))
