"""History and accounting, read off the event loop.

The writer's connection belongs to the serial worker on the event loop; a read of thousands
of rows there would hold every other request behind it. These reads go through a read-only
connection of their own (`ledger/reader.py`) in one thread of their own, so no read of one
user holds another's request.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from gpuallocd.errors import UnknownLease
from gpuallocd.ledger import Ledger
from gpuallocd.ledger.totals import Totals
from gpuallocd.model import HistoryEvent, UserUsage

__all__ = ["LongReads", "TotalsBetween"]

T = TypeVar("T")


class TotalsBetween(Protocol):
    """`totals_between(bounds)` of a ledger or a reader (ledger/totals_records.py)."""

    def __call__(self, bounds: Sequence[float]) -> list[dict[int, Totals]]: ...


class LongReads:
    def __init__(self, ledger: Ledger) -> None:
        self._reader = ledger.reader()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-read")

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    async def history(self, lease_id: str | None, limit: int) -> list[HistoryEvent]:
        """The last `limit` events (of one lease where given); UnknownLease for an id that
        never existed."""
        return await self._off_loop(self._history, lease_id, limit)

    async def history_json(
        self, lease_id: str | None, limit: int, user_name: Callable[[int], str]
    ) -> bytes:
        """`history` as a JSON array, rendered by SQLite in the reads thread."""
        return await self._off_loop(self._history_json, lease_id, limit, user_name)

    async def usage(self, since: float, until: float) -> list[UserUsage]:
        return await self._off_loop(self._reader.usage, since, until)

    async def gpu_hours_per_day(self, bounds: Sequence[float]) -> list[dict[str, float]]:
        """Each user's GPU-hours in each day between consecutive `bounds` (one point of each
        user's running totals a bound)."""
        return await self._off_loop(self._daily, bounds)

    def _daily(self, bounds: Sequence[float]) -> list[dict[str, float]]:
        return [
            {user: used.gpu_seconds / 3600 for user, used in day.items() if used.gpu_seconds > 0}
            for day in self._reader.daily_totals(bounds)
        ]

    async def totals_of(self, use: Callable[[TotalsBetween], T]) -> T:
        """`use(totals_between)` in the reads thread, where `totals_between(bounds)` reads
        the read-only connection (fair share's decayed use, a point per user and piece)."""
        return await self._off_loop(use, self._reader.totals_between)

    async def energy_after(self, seq: int) -> tuple[dict[str, float], int]:
        """Joules per user in the energy readings after `seq`, and the last one's seq."""
        return await self._off_loop(self._reader.energy_after, seq)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._reader.close()

    def _history(self, lease_id: str | None, limit: int) -> list[HistoryEvent]:
        events = self._reader.history(lease_id, limit)
        if lease_id is not None and not events and not self._reader.has_lease(lease_id):
            raise UnknownLease(f"no lease {lease_id!r}", lease=lease_id)
        return events

    def _history_json(
        self, lease_id: str | None, limit: int, user_name: Callable[[int], str]
    ) -> bytes:
        events = self._reader.history_json(lease_id, limit, user_name)
        if lease_id is not None and events == "[]" and not self._reader.has_lease(lease_id):
            raise UnknownLease(f"no lease {lease_id!r}", lease=lease_id)
        return events.encode()
