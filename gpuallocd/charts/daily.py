"""What the charts show, from the ledger's records: GPU-hours per user per day, each GPU's
leases over a window, and how long granted requests waited."""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuallocd.charts.bars import BarGroup
from gpuallocd.model import LeaseSpan, gpu_hours_per_day, local_midnights

__all__ = [
    "WAIT_BUCKETS",
    "Interval",
    "daily_bars",
    "daily_energy",
    "daily_hours",
    "gpu_timelines",
    "waiting_buckets",
]

# Upper bounds in seconds, and their labels; the last bucket is everything longer.
WAIT_BUCKETS = ((1.0, "<1 s"), (60.0, "<1 min"), (600.0, "<10 min"), (3600.0, "<1 h"))
LAST_BUCKET = ">1 h"


@dataclass(frozen=True, slots=True)
class Interval:
    """One lease on one GPU: from `start` to `end` (None: still held), whose, and its label."""

    gpu: str
    start: float
    end: float | None
    user: str
    label: str | None = None


def day_starts(days: int, now: float) -> list[float]:
    """Local midnights of the last `days` days, today's last, and the next midnight."""
    return local_midnights(days, now)


def daily_hours(spans: Iterable[LeaseSpan], days: int, now: float) -> list[BarGroup]:
    """Each of the last `days` days (today so far included) with each user's GPU-hours."""
    bounds = day_starts(days, now)
    bounds[-1] = min(bounds[-1], now)
    return daily_bars(bounds, gpu_hours_per_day(spans, bounds))


def daily_bars(bounds: Sequence[float], hours: Sequence[Mapping[str, float]]) -> list[BarGroup]:
    """One bar group a day, labelled with its date, from each day's hours per user."""
    return [
        BarGroup(time.strftime("%m-%d", time.localtime(start)), dict(values))
        for start, values in zip(bounds, hours, strict=False)
    ]


def daily_energy(
    readings: Iterable[tuple[float, str, float]], days: int, now: float
) -> list[BarGroup]:
    """Each of the last `days` days with each user's kWh, from (time, user, joules) readings
    (or sums of them by the hour: each counts on the day its time falls in)."""
    bounds = day_starts(days, now)
    kwh: list[dict[str, float]] = [{} for _ in range(days)]
    for at, user, joules in readings:
        day = bisect.bisect_right(bounds, at) - 1
        if 0 <= day < days:
            kwh[day][user] = kwh[day].get(user, 0.0) + joules / 3_600_000
    return [
        BarGroup(time.strftime("%m-%d", time.localtime(start)), values)
        for start, values in zip(bounds, kwh, strict=False)
    ]


def gpu_timelines(
    names: Mapping[str, str], intervals: Iterable[Interval]
) -> list[tuple[str, Sequence[Interval]]]:
    """Rows for `timeline`: every GPU of `names` (UUID to shown name) in its order, with its
    intervals; a lease on a MIG instance or a share shows on its GPU's row when the UUID
    given is the instance's and `names` maps it to the same name."""
    rows: dict[str, list[Interval]] = {name: [] for name in names.values()}
    for interval in intervals:
        name = names.get(interval.gpu)
        if name is not None:
            rows[name].append(interval)
    return list(rows.items())


def waiting_buckets(waits: Iterable[tuple[str, float]]) -> list[BarGroup]:
    """How many granted requests waited how long, per user: (user, seconds) in."""
    counts: list[dict[str, float]] = [{} for _ in range(len(WAIT_BUCKETS) + 1)]
    for user, seconds in waits:
        index = next((i for i, (bound, _) in enumerate(WAIT_BUCKETS) if seconds < bound), -1)
        counts[index][user] = counts[index].get(user, 0.0) + 1
    labels = [label for _, label in WAIT_BUCKETS] + [LAST_BUCKET]
    return [BarGroup(label, values) for label, values in zip(labels, counts, strict=True)]
