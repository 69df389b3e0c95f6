"""Fair-share order of a wait queue: pure (a snapshot of the waiters and of recent use in,
the order out, with each waiter's priority and why).

A waiter's priority is what its account (its owner, or the owner's group) has *not* used
lately, plus what it has waited:

    priority = wait_weight * hours waited - decayed GPU-hours of the account

Use decays with a half-life: a GPU-hour held `h` ago counts `2 ** (-h / half_life)`. The
highest priority is served first; equal priorities by arrival. The queue never starves
anyone: every newcomer starts at a priority of at most 0, so a waiter whose account used
`U` decayed GPU-hours is ahead of every later arrival after `U / wait_weight` hours, and
its account's use only falls while it waits.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuallocd.model import LeaseSpan

__all__ = [
    "FairShareWaiter",
    "Priority",
    "decayed_from_pieces",
    "decayed_gpu_hours",
    "fair_share_order",
    "horizon_seconds",
    "piece_bounds",
    "priority_of",
]

HOUR = 3600.0
HALF_LIVES_KEPT = 10  # use older than ten half-lives counts less than 0.1%: left out
# The newest piece of the horizon is 1/64 of a half-life; each older one is as much longer as
# its use weighs less (its length doubles every half-life of age), so every piece may be off
# by the same at most: half its decay's spread, about 0.55% of an hour of one GPU used now
# per GPU-hour used in it (exact for use spread over the piece), in about 90 pieces.
NEWEST_PIECES_PER_HALF_LIFE = 64


@dataclass(frozen=True, slots=True)
class FairShareWaiter:
    """One waiter as the order reads it: its id, account, and when it joined the queue."""

    id: str
    account: str
    since: float


@dataclass(frozen=True, slots=True)
class Priority:
    """A waiter's place: its priority and the two terms it is made of."""

    waiter_id: str
    account: str
    priority: float
    usage_gpu_hours: float  # the account's decayed GPU-hours
    waited_hours: float

    def why(self) -> str:
        return (
            f"{self.account} used {self.usage_gpu_hours:.2f} decayed GPU-h; "
            f"waited {self.waited_hours:.2f} h"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "priority": round(self.priority, 6),
            "account": self.account,
            "usage_gpu_hours": round(self.usage_gpu_hours, 6),
            "waited_hours": round(self.waited_hours, 6),
            "why": self.why(),
        }


def horizon_seconds(half_life_hours: float) -> float:
    """How far back use still counts."""
    return HALF_LIVES_KEPT * half_life_hours * HOUR


def _decayed_seconds(start: float, end: float, now: float, half_life: float) -> float:
    """The integral of 2 ** (-(now - t) / half_life) over [start, end] (seconds)."""
    if end <= start:
        return 0.0
    rate = math.log(2) / half_life
    return (math.exp(-rate * (now - end)) - math.exp(-rate * (now - start))) / rate


def decayed_gpu_hours(
    spans: Iterable[LeaseSpan],
    now: float,
    half_life_hours: float,
    account_of: Mapping[int, str] | None = None,
) -> dict[str, float]:
    """Decayed GPU-hours per account (the owner's name, or `account_of[uid]`); an active
    lease counts up to `now`."""
    half_life = half_life_hours * HOUR
    found: dict[str, float] = {}
    for span in spans:
        end = now if span.ended_at is None else min(span.ended_at, now)
        seconds = _decayed_seconds(span.created_at, end, now, half_life)
        account = (account_of or {}).get(span.owner_uid, span.owner_name)
        found[account] = found.get(account, 0.0) + span.gpus * seconds / HOUR
    return found


def piece_bounds(now: float, half_life_hours: float) -> list[float]:
    """The bounds, oldest first, of the pieces of the horizon up to `now` that
    `decayed_from_pieces` weighs: the same number whatever the half-life or the history."""
    half_life = half_life_hours * HOUR
    newest = half_life / NEWEST_PIECES_PER_HALF_LIFE
    horizon = horizon_seconds(half_life_hours)
    ages = [0.0]
    while ages[-1] < horizon:
        ages.append(min(horizon, ages[-1] + newest * 2 ** (ages[-1] / half_life)))
    return [now - age for age in reversed(ages)]


def decayed_from_pieces(
    bounds: Sequence[float],
    pieces: Sequence[Mapping[str, float]],
    now: float,
    half_life_hours: float,
) -> dict[str, float]:
    """Decayed GPU-hours per account from each account's GPU-seconds in each piece between
    consecutive `bounds` (read from running totals, two points a piece, not from the leases):
    each piece's use weighs the decay averaged over the piece (`piece_bounds`)."""
    half_life = half_life_hours * HOUR
    found: dict[str, float] = {}
    for (start, end), used in zip(itertools.pairwise(bounds), pieces, strict=False):
        weight = _decayed_seconds(start, end, now, half_life) / (end - start)
        for account, seconds in used.items():
            found[account] = found.get(account, 0.0) + seconds * weight / HOUR
    return found


def fair_share_order(
    waiters: Sequence[FairShareWaiter],
    usage: Mapping[str, float],
    *,
    now: float,
    wait_weight: float,
) -> list[Priority]:
    """The waiters in the order they are served, highest priority first; `waiters` are given
    in order of arrival, which breaks ties."""
    priorities = [
        priority_of(w, usage.get(w.account, 0.0), now=now, wait_weight=wait_weight) for w in waiters
    ]
    ranked = sorted(enumerate(priorities), key=lambda item: (-item[1].priority, item[0]))
    return [priority for _, priority in ranked]


def priority_of(
    waiter: FairShareWaiter, used: float, *, now: float, wait_weight: float
) -> Priority:
    """One waiter's priority now, its account having used `used` decayed GPU-hours. Of two
    waiters of one account, the one that came first is as high or higher (while the clock
    has not gone back between their arrivals)."""
    waited = max(0.0, now - waiter.since) / HOUR
    return Priority(
        waiter_id=waiter.id,
        account=waiter.account,
        priority=wait_weight * waited - used,
        usage_gpu_hours=used,
        waited_hours=waited,
    )
