"""The façade's part for scheduling: the queue's order and fair-share use, and advance
reservations (docs/scheduling.md). Each method runs its work through the serial worker."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import NodeView
from gpuallocd.allocator.leases.specs import AllocatorSettings
from gpuallocd.allocator.long_reads import LongReads
from gpuallocd.allocator.queue.advance import AdvanceReservations, ReserveSpec, reserved_hours
from gpuallocd.allocator.queue.order import QueueOrder
from gpuallocd.allocator.queue.waiting import WaitQueue
from gpuallocd.allocator.site.drain import DrainBoard
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.site.reservation_board import ReservationBoard
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller

__all__ = ["SchedulingDesk"]

log = logging.getLogger(__name__)


class SchedulingDesk:
    """Fair-share use and advance reservations over the façade's queue."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        ledger: Ledger,
        worker: SerialWorker,
        queue: WaitQueue,
        order: QueueOrder,
        clock: Callable[[], float],
        reads: LongReads,
        *,
        settings: AllocatorSettings,
        node: NodeView,
        quota: Quota,
        drains: DrainBoard,
        reservations: ReservationBoard,
    ) -> None:
        """The parts advance reservations are made with (queue/advance.py); `reservations`:
        their board, whose starts and ends `tick` records too."""
        self._reads = reads
        self._clock = clock
        self._advance = AdvanceReservations(
            lifecycle,
            quota=quota,
            node=node,
            drains=drains,
            reservations=reservations,
            default_policy=settings.default_policy,
        )
        self._board = reservations
        self._ledger = ledger
        self._worker = worker
        self._queue = queue
        self._order = order

    @property
    def queue_order(self) -> str:
        return self._order.name

    async def fair_share_usage(self) -> dict[str, float]:
        """Each account's decayed GPU-hours now (the figure fair share orders by), read off
        the event loop."""
        use = functools.partial(self._order.usage, self._clock())
        return await self._reads.totals_of(use)

    async def reserve(self, caller: Caller, spec: ReserveSpec) -> dict[str, Any]:
        return await self._worker.run(self._reserve, caller, spec)

    def _reserve(self, caller: Caller, spec: ReserveSpec) -> dict[str, Any]:
        now = self._clock()
        made = self._advance.reserve(caller, spec, now)
        return self._advance.to_json(made, now)

    async def unreserve(self, caller: Caller, reservation_id: str) -> dict[str, Any]:
        found = await self._worker.run(self._unreserve, caller, reservation_id)
        self._queue.kick()  # its GPUs are everyone's again
        return found

    def _unreserve(self, caller: Caller, reservation_id: str) -> dict[str, Any]:
        now = self._clock()
        ended = self._advance.cancel(caller, reservation_id, now)
        return self._advance.to_json(ended, now)

    async def reservations(self, *, ended: bool = False) -> list[dict[str, Any]]:
        """Reservations to come and running (`ended`: every one the ledger keeps)."""
        return await self._worker.run(self._advance.listing, self._ledger, self._clock(), ended)

    async def reservation_events(self, limit: int) -> list[dict[str, Any]]:
        records = await self._worker.run(self._ledger.reservation_events, None, limit)
        return [record.to_json() for record in records]

    async def reserved_hours(self, since: float, until: float) -> list[dict[str, Any]]:
        """GPU-hours each reservation held inside [since, until] (for `usage`)."""
        return await self._worker.run(reserved_hours, self._ledger, since, until)

    async def tick(self) -> None:
        """Record reservations that started or ended; one that ended frees its GPUs. Fair
        share's figures are read again off the event loop before they go stale."""
        now = self._clock()
        if self._order.due(now):
            self._order.refresh(await self.fair_share_usage(), now)
        board = self._board
        if not board.due(self._clock()):
            return  # nothing to record: no call on the worker
        changes = await self._worker.run(board.tick, self._clock())
        for reservation, event in changes:
            log.info("reservation %s for %s %s", reservation.id, reservation.holder, event.value)
        if changes:
            self._queue.kick()
