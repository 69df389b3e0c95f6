"""The order the wait queue is served in: first come, first served, or fair share.

Under `fair-share` the order comes from the pure `policies.fair_share` over the waiters and
each account's decayed GPU-hours, weighed over pieces of the horizon read from the users'
running totals (a fixed number of points per user, whatever the history: ledger/totals.py,
`decayed_from_pieces`), never from the leases one by one. That use changes
only as time passes (a grant adds nothing at the moment it is made), so it is read again at
most once a minute of the daemon's clock while the queue is served.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from gpuallocd.allocator.leases.specs import AllocatorSettings
from gpuallocd.allocator.long_reads import TotalsBetween
from gpuallocd.host.users import primary_group_name
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller
from gpuallocd.policies.fair_share import (
    FairShareWaiter,
    Priority,
    decayed_from_pieces,
    fair_share_order,
    piece_bounds,
    priority_of,
)

__all__ = ["FAIR_SHARE", "FIFO", "QueueOrder", "primary_group_of"]

FIFO = "fifo"
FAIR_SHARE = "fair-share"
USAGE_REFRESH_SECONDS = 60.0


class _Queued(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def caller(self) -> Caller: ...

    @property
    def since(self) -> float: ...


W = TypeVar("W", bound=_Queued)


def primary_group_of(uid: int) -> str:
    """A uid's primary group's name, as fair share's `group` accounts name it."""
    return primary_group_name(uid)


class QueueOrder:
    """Arranges waiters for serving; gives each one its fair-share priority."""

    def __init__(
        self, settings: AllocatorSettings, ledger: Ledger, clock: Callable[[], float]
    ) -> None:
        self._settings = settings
        self._ledger = ledger
        self._clock = clock
        self._usage: dict[str, float] = {}
        self._usage_at: float | None = None

    @property
    def name(self) -> str:
        return self._settings.queue_order

    @property
    def fair(self) -> bool:
        return self._settings.queue_order == FAIR_SHARE

    def account(self, caller: Caller) -> str:
        """Whose use sets the caller's priority: the user, or the primary group of the user's
        passwd entry (the account `usage` charges), never the process's gid (`sg`)."""
        if self._settings.fair_share_by == "group":
            return primary_group_name(caller.uid)
        return caller.user

    def arrange(self, waiters: Sequence[W]) -> list[tuple[W, Priority | None]]:
        """The waiters (given in order of arrival) in the order they are served."""
        if not self.fair or not waiters:
            return [(w, None) for w in waiters]
        now = self._clock()
        entries = [FairShareWaiter(w.id, self.account(w.caller), w.since) for w in waiters]
        order = fair_share_order(
            entries,
            self._cached_usage(now),
            now=now,
            wait_weight=self._settings.fair_share_wait_weight,
        )
        by_id = {w.id: w for w in waiters}
        return [(by_id[p.waiter_id], p) for p in order]

    def priorities(self) -> Callable[[_Queued], float] | None:
        """Each waiter's fair-share priority at one reading of the clock, as `arrange` ranks
        it (None under fifo): to look at a few waiters without ranking the whole queue."""
        if not self.fair:
            return None
        now = self._clock()
        usage = self._cached_usage(now)
        weight = self._settings.fair_share_wait_weight

        def priority(waiter: _Queued) -> float:
            account = self.account(waiter.caller)
            entry = FairShareWaiter(waiter.id, account, waiter.since)
            used = usage.get(account, 0.0)
            return priority_of(entry, used, now=now, wait_weight=weight).priority

        return priority

    def own_priority(self, caller: Caller) -> float:
        """The priority of a new request of `caller` (it has waited 0 hours): under fair share
        it lets go first the waiters of a priority at least this."""
        return -self._cached_usage(self._clock()).get(self.account(caller), 0.0)

    def usage(
        self, now: float | None = None, totals_between: TotalsBetween | None = None
    ) -> dict[str, float]:
        """Each account's decayed GPU-hours now, from the users' running totals at the bounds
        of the horizon's pieces (the ledger's own connection by default; a reader's off the
        event loop for `usage`)."""
        at = self._clock() if now is None else now
        half_life = self._settings.fair_share_half_life_hours
        read = self._ledger.totals_between if totals_between is None else totals_between
        unleased = self._settings.fair_share_counts_unleased
        bounds = piece_bounds(at, half_life)
        by_group = self._settings.fair_share_by == "group"
        pieces: list[dict[str, float]] = []
        for piece in read(bounds):
            used: dict[str, float] = {}
            for uid, totals in piece.items():
                account = primary_group_name(uid) if by_group else (totals.name or str(uid))
                seconds = totals.gpu_seconds + (totals.unleased_seconds if unleased else 0.0)
                used[account] = used.get(account, 0.0) + seconds
            pieces.append(used)
        return decayed_from_pieces(bounds, pieces, at, half_life)

    def due(self, now: float) -> bool:
        """Whether the decayed figures should be read again ahead of need (a fair queue whose
        figures are half their life old): the reads thread does it, so arranging the queue
        on the loop seldom has to."""
        return self.fair and self._age(now) >= USAGE_REFRESH_SECONDS / 2

    def refresh(self, usage: dict[str, float], at: float) -> None:
        """Figures as of `at` (read off the event loop by `SchedulingDesk.tick`); older ones
        than those held are dropped."""
        if self._usage_at is None or at >= self._usage_at:
            self._usage, self._usage_at = usage, at

    def _age(self, now: float) -> float:
        return float("inf") if self._usage_at is None else abs(now - self._usage_at)

    def _cached_usage(self, now: float) -> dict[str, float]:
        """Figures of less than USAGE_REFRESH_SECONDS ago; read here, on the loop, only where
        the refresh ahead of need has not come (the first time, or the clock jumped)."""
        if self._age(now) >= USAGE_REFRESH_SECONDS:
            self.refresh(self.usage(now), now)
        return self._usage
