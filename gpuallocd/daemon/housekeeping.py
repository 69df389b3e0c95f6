"""What the daemon does between requests: expire leases, sample live GPU state, and poll
processes that have no pidfd. Each loop calls the allocator's façade and nothing else."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from gpuallocd.allocator import AllocatorFacade
from gpuallocd.errors import GpuallocError
from gpuallocd.inventory import Inventory

__all__ = ["Housekeeper"]

log = logging.getLogger(__name__)

EXPIRY_TICK_SECONDS = 0.5


class Housekeeper:
    """The daemon's background tasks, started and stopped together."""

    def __init__(
        self, facade: AllocatorFacade, inventory: Inventory, sample_interval_seconds: float
    ) -> None:
        self._facade = facade
        self._inventory = inventory
        self._sample_interval = sample_interval_seconds
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Reconcile with processes that died while the daemon was down, then start the loops."""
        await self._facade.start()
        self._spawn(self._expire_forever())
        self._spawn(self._sample_forever())
        self._spawn(self._facade.poll_processes())

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.create_task(coroutine))

    async def _expire_forever(self) -> None:
        while True:
            try:
                await self._facade.expire_due()
            except GpuallocError as exc:
                log.error("expiring leases failed: %s", exc.message)
            await asyncio.sleep(EXPIRY_TICK_SECONDS)

    async def _sample_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                # NVML calls block: they run in the loop's default thread pool.
                states = await loop.run_in_executor(None, self._inventory.sample)
                await self._facade.update_live(states)
            except Exception:
                log.exception("sampling live GPU state failed; will retry")
            await asyncio.sleep(self._sample_interval)
