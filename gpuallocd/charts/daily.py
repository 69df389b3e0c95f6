"""What the charts show, from the ledger's records: GPU-hours and kWh per user per day (from
the users' running totals), each GPU's leases over a window, and how long granted requests
waited."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuallocd.charts.bars import BarGroup
from gpuallocd.model import local_midnights

__all__ = [
    "WAIT_BOUNDS",
    "WAIT_BUCKETS",
    "Interval",
    "daily_bars",
    "day_starts",
    "gpu_timelines",
    "waiting_bars",
]

# Upper bounds in seconds, and their labels; the last bucket is everything longer.
WAIT_BUCKETS = ((1.0, "<1 s"), (60.0, "<1 min"), (600.0, "<10 min"), (3600.0, "<1 h"))
LAST_BUCKET = ">1 h"
WAIT_BOUNDS = tuple(bound for bound, _ in WAIT_BUCKETS)


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


def daily_bars(bounds: Sequence[float], values: Sequence[Mapping[str, float]]) -> list[BarGroup]:
    """One bar group a day, labelled with its date, from each day's figure per user."""
    return [
        BarGroup(time.strftime("%m-%d", time.localtime(start)), dict(day))
        for start, day in zip(bounds, values, strict=False)
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


def waiting_bars(counts: Iterable[tuple[str, int, int]]) -> list[BarGroup]:
    """How many granted requests waited how long, per user: (user, bucket, count) in, the
    bucket an index of WAIT_BUCKETS (its length: longer than the last)."""
    groups: list[dict[str, float]] = [{} for _ in range(len(WAIT_BUCKETS) + 1)]
    for user, bucket, count in counts:
        groups[bucket][user] = groups[bucket].get(user, 0.0) + count
    labels = [label for _, label in WAIT_BUCKETS] + [LAST_BUCKET]
    return [BarGroup(label, values) for label, values in zip(labels, groups, strict=True)]
