"""The façade's part for the record: history, usage, limits and what admins did.

Reads of thousands of rows run off the event loop (`long_reads.py`); the rest run in the
serial worker like every allocator call. `AllocatorFacade.accounting` is the one instance.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.long_reads import LongReads
from gpuallocd.allocator.queue.waiting import WaitQueue
from gpuallocd.allocator.site.purge import purge_before
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.ledger import Ledger
from gpuallocd.model import AdminAction, Caller, HistoryEvent, Lease, UserUsage, day_bounds

__all__ = ["AccountingDesk"]


class AccountingDesk:
    """History, usage, limits and the admin record, for the API and housekeeping."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        ledger: Ledger,
        worker: SerialWorker,
        reads: LongReads,
        queue: WaitQueue,
        clock: Callable[[], float],
        expire_due: Callable[[], Awaitable[list[Lease]]],
        record_energy: Callable[[], Awaitable[None]],
        *,
        quota: Quota,
    ) -> None:
        """`quota`: the limits whose report `limits` gives."""
        self._lifecycle = lifecycle
        self._quota = quota
        self._ledger = ledger
        self._worker = worker
        self._reads = reads
        self._queue = queue
        self._clock = clock
        self._expire_due = expire_due
        # energy read at grants and ends waits up to a second to be written with the next;
        # a read of the record writes it first, so an end's energy is never said to be 0
        self._record_energy = record_energy

    async def history(self, lease_id: str | None, limit: int) -> list[HistoryEvent]:
        await self._record_energy()
        return await self._reads.history(lease_id, limit)  # off the event loop: long_reads.py

    async def history_json(
        self, lease_id: str | None, limit: int, user_name: Callable[[int], str]
    ) -> bytes:
        await self._record_energy()
        return await self._reads.history_json(lease_id, limit, user_name)

    async def limits(self, subject: Caller) -> dict[str, Any]:
        waiting = self._queue.waiting_of(subject.uid)
        return await self._worker.run(self._limits_report, subject, waiting)

    def _limits_report(self, subject: Caller, waiting: int) -> dict[str, Any]:
        """The limits that apply to `subject` and their current use (`gpuallocctl limits`)."""
        return self._quota.report(subject, self._lifecycle.leases(), waiting)

    async def usage(
        self, since: float, until: float | None, user: str | None
    ) -> tuple[float, list[UserUsage]]:
        """The window's end (now by default), and each user's GPU-hours, leases and waiting
        time inside [since, end]; only `user` (a name or a uid) where given."""
        await self._expire_due()  # a lease past its TTL is charged up to its expiry, no more
        await self._record_energy()
        end = self._clock() if until is None else until
        found = await self._reads.usage(since, end)
        if user is not None:
            found = [u for u in found if user in (u.user, str(u.uid))]
        return end, found

    async def usage_per_day(
        self, since: float, until: float, user: str | None
    ) -> list[tuple[float, dict[str, float]]]:
        """Each local calendar day from the day of `since` to `until`: its start and each
        user's GPU-hours in it (only `user`'s where given), in one read of the ledger."""
        bounds = day_bounds(since, until)
        hours = await self._reads.gpu_hours_per_day(bounds)
        if user is not None:
            hours = [{n: h for n, h in day.items() if n == user} for day in hours]
        return list(zip(bounds, hours, strict=False))

    async def admin_actions(self, limit: int) -> list[AdminAction]:
        return await self._worker.run(self._ledger.admin_actions, limit)

    async def unleased_history(self, limit: int) -> list[dict[str, Any]]:
        return await self._worker.run(self._ledger.unleased_events, limit)

    async def purge_history(self, retention_seconds: float) -> int:
        """Delete what ended more than `retention_seconds` ago, in batches (purge.py)."""
        now = self._clock()
        return await purge_before(self._worker, self._ledger, now - retention_seconds, now)
