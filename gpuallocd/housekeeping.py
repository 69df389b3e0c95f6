"""What the daemon does between requests: expire leases, end leases of dead processes,
sample live GPU state, and wake the wait queue whenever GPUs may have come free."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from gpuallocd.errors import GpuallocError
from gpuallocd.inventory import Inventory
from gpuallocd.leases import Lease
from gpuallocd.liveness import ProcessWatcher
from gpuallocd.service import Allocator
from gpuallocd.waitqueue import WaitQueue
from gpuallocd.writer import SerialWorker

__all__ = ["Housekeeper"]

log = logging.getLogger(__name__)

EXPIRY_TICK_SECONDS = 0.5


class Housekeeper:
    """The daemon's background tasks, started and stopped together."""

    def __init__(
        self,
        allocator: Allocator,
        worker: SerialWorker,
        queue: WaitQueue,
        inventory: Inventory,
        sample_interval_seconds: float,
    ) -> None:
        self._allocator = allocator
        self._worker = worker
        self._queue = queue
        self._inventory = inventory
        self._sample_interval = sample_interval_seconds
        self.watcher = ProcessWatcher(self._process_exited)
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Reconcile with processes that died while the daemon was down, then start tasks."""
        for lease in await self._worker.run(self._allocator.reconcile_processes):
            log.info(
                "lease %s ended: its process %s exited while the daemon was down",
                lease.id,
                lease.pid,
            )
        for lease in await self._worker.run(self._allocator.bound_leases):
            self.watcher.watch(lease)
        self._spawn(self._expire_forever())
        self._spawn(self._sample_forever())
        self._spawn(self.watcher.poll_forever())

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.watcher.close()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.create_task(coroutine))

    def _process_exited(self, lease_ids: list[str]) -> None:
        self._spawn(self._end_for_exited(lease_ids))

    async def _end_for_exited(self, lease_ids: Sequence[str]) -> None:
        try:
            ended = await self._worker.run(self._allocator.end_for_exited_process, lease_ids)
        except GpuallocError as exc:
            log.error("ending leases of an exited process failed: %s", exc.message)
            return
        for lease in ended:  # leases freed before their process exited are not listed
            log.info("lease %s ended: its process %s exited", lease.id, lease.pid)
        self._released(ended)

    def _released(self, leases: Sequence[Lease]) -> None:
        if leases:
            self._queue.kick()

    async def _expire_forever(self) -> None:
        while True:
            try:
                expired = await self._worker.run(self._allocator.expire_due)
                for lease in expired:
                    log.info("lease %s of %s expired", lease.id, lease.owner_name)
                self._released(expired)
                bound = await self._worker.run(self._allocator.bound_leases)
                self.watcher.retain(lease.id for lease in bound)
            except GpuallocError as exc:
                log.error("expiring leases failed: %s", exc.message)
            await asyncio.sleep(EXPIRY_TICK_SECONDS)

    async def _sample_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                states = await loop.run_in_executor(None, self._inventory.sample)
                await self._worker.run(self._allocator.update_live, states)
                self._queue.kick()  # a GPU may have come back to health
            except Exception:
                log.exception("sampling live GPU state failed; will retry")
            await asyncio.sleep(self._sample_interval)
