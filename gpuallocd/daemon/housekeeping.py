"""What the daemon does between requests: expire leases, sample live GPU state (through the
driver guard), poll processes that have no pidfd, read leased GPUs' energy and power, do
owed work as it comes due, tell what is due (notices), carry preemptions on and purge
history past its retention. Each loop calls the allocator's façade and nothing else."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from gpuallocd.allocator import AllocatorFacade
from gpuallocd.daemon.driver_guard import DriverGuard
from gpuallocd.errors import GpuallocError
from gpuallocd.inventory import Inventory

__all__ = ["Housekeeper"]

log = logging.getLogger(__name__)

EXPIRY_TICK_SECONDS = 0.5
PURGE_INTERVAL_SECONDS = 3600.0  # the first purge runs at start


class Housekeeper:
    """The daemon's background tasks, started and stopped together."""

    def __init__(
        self,
        facade: AllocatorFacade,
        inventory: Inventory,
        sample_interval_seconds: float,
        *,
        retention_seconds: float | None = None,
        guard: DriverGuard | None = None,
        energy_interval_seconds: float = 0.0,
    ) -> None:
        self._facade = facade
        self._guard = guard or DriverGuard.of(inventory, deadline_seconds=10.0)
        self._retention = retention_seconds
        self._inventory = inventory
        self._sample_interval = sample_interval_seconds
        self._energy_interval = energy_interval_seconds
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Reconcile with processes that died while the daemon was down, then start the loops."""
        await self._facade.start()
        await self._facade.power.start()  # put back what a stopped daemon left capped
        self._spawn(self._expire_forever())
        self._spawn(self._notices_forever())
        self._spawn(self._preemption_forever())
        self._spawn(self._sample_forever())
        self._spawn(self._facade.poll_processes())
        if self._retention is not None:
            self._spawn(self._purge_forever(self._retention))
        self._spawn(self._facade.owed_work())  # woken when work is due, never polled
        if self._energy_interval > 0 and self._facade.energy.metered:
            self._spawn(self._meter_forever())
        self._spawn(self._reapply_caps_forever())

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:  # a limit owed back is put back now, not left to the next start
            await self._facade.power.put_back_now()
            await self._facade.run_cleanups(everything=True)
            await self._facade.energy.record()  # what the last grants and ends read
        except GpuallocError as exc:
            log.error("finishing owed work at stop failed: %s", exc.message)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.create_task(coroutine))

    async def _expire_forever(self) -> None:
        while True:
            try:
                await self._facade.expire_due()
            except GpuallocError as exc:
                log.error("expiring leases failed: %s", exc.message)
            await asyncio.sleep(EXPIRY_TICK_SECONDS)

    async def _notices_forever(self) -> None:
        """Warnings at their thresholds, budgets, the feed's retention (allocator/notices/)."""
        while True:
            try:
                await self._facade.notices.tick()
            except GpuallocError as exc:
                log.error("telling what is due failed: %s", exc.message)
            await asyncio.sleep(EXPIRY_TICK_SECONDS)

    async def _preemption_forever(self) -> None:
        """Preemptions' signals and deadlines, reservations about to start, minimum runtimes
        passed (allocator/preemption/)."""
        while True:
            try:
                await self._facade.preemption.tick()
            except GpuallocError as exc:
                log.error("preemption's timer failed: %s", exc.message)
            await asyncio.sleep(EXPIRY_TICK_SECONDS)

    async def _sample_forever(self) -> None:
        while True:
            try:
                # Driver calls block and may hang: the guard runs them on a thread of their
                # own with a deadline; None while the driver hangs (the last sample stands).
                states = await self._guard.run("sample", self._inventory.sample)
                if states is not None:
                    await self._facade.update_live(states)
            except Exception:
                log.exception("sampling live GPU state failed; will retry")
            await asyncio.sleep(self._sample_interval)

    async def _meter_forever(self) -> None:
        while True:
            await asyncio.sleep(self._energy_interval)
            try:
                await self._facade.energy.meter()
            except GpuallocError as exc:
                log.error("reading the leased GPUs' energy failed: %s", exc.message)

    async def _reapply_caps_forever(self) -> None:
        while True:
            await asyncio.sleep(self._energy_interval if self._energy_interval > 0 else 60.0)
            try:
                await self._facade.power.reapply()
            except GpuallocError as exc:
                log.error("setting power caps again failed: %s", exc.message)

    async def _purge_forever(self, retention_seconds: float) -> None:
        while True:
            try:
                purged = await self._facade.accounting.purge_history(retention_seconds)
                if purged:
                    log.info("purged %d lease(s) and admin action(s) past retention", purged)
            except GpuallocError as exc:
                log.error("purging old history failed: %s", exc.message)
            await asyncio.sleep(PURGE_INTERVAL_SECONDS)
