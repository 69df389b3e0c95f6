"""The allocator's façade: the one object the API (and the daemon's housekeeping) calls.

Each method is one whole operation: it runs the lease lifecycle through the serial worker
(one call at a time, on the event loop, answered after the ledger commit), and does what
must follow. A grant registers the process watch of a bound lease; a lease that ends wakes
the wait queue. Nothing outside this package touches the worker, the queue or the watcher.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from gpuallocd.allocator.families import ProcessFamilies, read_process_table
from gpuallocd.allocator.lifecycle import LeaseLifecycle
from gpuallocd.allocator.node_view import GpuStatus
from gpuallocd.allocator.specs import AllocateSpec
from gpuallocd.allocator.terminate import terminate_family
from gpuallocd.allocator.waitqueue import WaitQueue
from gpuallocd.allocator.watcher import POLL_SECONDS, ProcessWatcher, process_start_time
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.errors import GpuallocError
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller, HistoryEvent, Lease, LiveState, Topology

__all__ = ["AllocatorFacade"]

log = logging.getLogger(__name__)


class AllocatorFacade:
    """Async entry points over one lease lifecycle, its worker, wait queue and process watcher."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        ledger: Ledger,
        *,
        clock: Callable[[], float],
        revoke_grace_seconds: float = 30.0,
    ) -> None:
        self._lifecycle = lifecycle
        self._worker = SerialWorker(ledger.unit_of_work, on_commit_failure=lifecycle.reload)
        self._queue = WaitQueue(lifecycle, self._worker, clock)
        self._watcher = ProcessWatcher(self._process_exited)
        self._families = ProcessFamilies()
        self._scan_lock = asyncio.Lock()
        self._terminate_on_revoke: set[str] = set()
        self._revoke_grace = revoke_grace_seconds
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def topology(self) -> Topology:
        return self._lifecycle.topology

    # Requests -------------------------------------------------------------------------------

    async def allocate(
        self, caller: Caller, spec: AllocateSpec, *, wait: bool = False, timeout: float | None
    ) -> Lease:
        """Grant now, or queue when `wait`; a bound lease is watched from the moment of grant.

        The watch is set up in the same worker call as the grant. If this call is cancelled
        after the grant (the client left, or timed out), the grant is withdrawn.
        """
        granted: list[Lease] = []

        def on_grant(lease: Lease) -> None:
            granted.append(lease)
            self._watch(lease, terminate=spec.on_revoke == "terminate")

        try:
            return await self._queue.allocate(
                caller, spec, wait=wait, timeout=timeout, on_grant=on_grant
            )
        except BaseException:
            for lease in granted:
                self.withdraw(lease)
            raise

    def withdraw(self, lease: Lease) -> None:
        """Undo a grant whose answer did not reach its client (soon, in order)."""
        self._spawn(self._withdraw(lease.id))

    async def _withdraw(self, lease_id: str) -> None:
        for lease in await self._worker.run(self._lifecycle.withdraw, lease_id):
            log.info("lease %s withdrawn: its answer could not be delivered", lease.id)
            self._released([lease])

    def _watch(self, lease: Lease, *, terminate: bool = False) -> None:
        self._watcher.watch(lease)
        self._families.track(lease)
        if terminate:
            self._terminate_on_revoke.add(lease.id)

    def processes_of(self, lease_id: str) -> list[int]:
        """The pids a bound lease covers now: its holder and the processes started under it."""
        return [pid for pid, _start in self._families.members(lease_id)]

    async def renew(self, caller: Caller, lease_id: str, ttl_seconds: float | None) -> Lease:
        """Renew; also look for new processes of the lease now (a wrapper renews after it
        started its command, so that the command is known before anything can go wrong)."""
        lease = await self._worker.run(self._lifecycle.renew, caller, lease_id, ttl_seconds)
        await self.scan_families()
        return lease

    async def free(self, caller: Caller, lease_id: str) -> Lease:
        lease = await self._worker.run(self._lifecycle.free, caller, lease_id)
        self._queue.kick()
        return lease

    async def revoke(self, caller: Caller, lease_id: str, reason: str | None) -> Lease:
        lease = await self._worker.run(self._lifecycle.revoke, caller, lease_id, reason)
        if lease.id in self._terminate_on_revoke:
            holder = None
            if lease.pid is not None and lease.pid_start_time is not None:
                holder = (lease.pid, lease.pid_start_time)
            members = self._families.members(lease.id)
            terminate_family(members, holder, self._revoke_grace, process_start_time)
        self._queue.kick()
        return lease

    async def release_gpu(self, caller: Caller, ref: str | int) -> GpuStatus:
        """Root's override for a draining GPU: it may be granted again."""
        status = await self._worker.run(self._lifecycle.release_gpu, caller, ref)
        self._queue.kick()
        return status

    async def lease(self, lease_id: str) -> Lease:
        return await self._worker.run(self._lifecycle.lease, lease_id)

    async def leases(self) -> list[Lease]:
        return await self._worker.run(self._lifecycle.leases)

    async def gpu_status(self) -> list[GpuStatus]:
        return await self._worker.run(self._lifecycle.gpu_status, self._queue.reservations())

    async def history(self, lease_id: str | None, limit: int) -> list[HistoryEvent]:
        return await self._worker.run(self._lifecycle.history, lease_id, limit)

    def waiters(self) -> list[dict[str, Any]]:
        return self._queue.waiters()

    async def adopt_topology(self, topology: Topology) -> Topology:
        """Take a rediscovered topology; GPUs that came back may serve the queue."""
        await self._worker.run(self._lifecycle.set_topology, topology)
        self._queue.kick()
        return self._lifecycle.topology

    # Housekeeping ---------------------------------------------------------------------------

    async def start(self) -> None:
        """End bound leases whose process died while the daemon was down; watch the others."""
        for lease in await self._worker.run(self._lifecycle.reconcile_processes):
            log.info(
                "lease %s ended: its process %s exited while the daemon was down",
                lease.id,
                lease.pid,
            )
        for lease in await self._worker.run(self._lifecycle.bound_leases):
            self._watch(lease)

    async def expire_due(self) -> list[Lease]:
        """End leases whose TTL ran out, and stop watching processes of ended leases."""
        expired = await self._worker.run(self._lifecycle.expire_due)
        for lease in expired:
            log.info("lease %s of %s expired", lease.id, lease.owner_name)
        self._released(expired)
        bound = [lease.id for lease in await self._worker.run(self._lifecycle.bound_leases)]
        self._watcher.retain(bound)
        self._families.retain(bound)
        self._terminate_on_revoke &= set(bound)
        return expired

    async def update_live(self, states: Mapping[str, LiveState]) -> None:
        """A new live sample; a GPU may have come back to health, so serve the queue."""
        await self._worker.run(self._lifecycle.update_live, states)
        self._queue.kick()

    async def poll_processes(self) -> None:
        """Watch holders that have no pidfd, and the families of bound leases, by reading
        /proc once a second (runs until cancelled)."""
        await asyncio.gather(self._watcher.poll_forever(), self._scan_forever())

    async def _scan_forever(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            await self.scan_families()

    async def scan_families(self) -> None:
        """Read /proc (off the event loop), grow the families, end those all gone."""
        if not self._families:
            return
        async with self._scan_lock:
            loop = asyncio.get_running_loop()
            table = await loop.run_in_executor(None, read_process_table)
            emptied = self._families.scan(table)
        if emptied:
            await self._end_for_exited(emptied)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._watcher.close()
        self._worker.close()

    def _process_exited(self, lease_ids: list[str]) -> None:
        """A holder exited: its lease ends if no process started under it still runs."""
        self._spawn(self._holder_exited(lease_ids))

    async def _holder_exited(self, lease_ids: list[str]) -> None:
        untracked = [i for i in lease_ids if not self._families.members(i)]
        if untracked:
            await self._end_for_exited(untracked)
        await self.scan_families()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _end_for_exited(self, lease_ids: Sequence[str]) -> None:
        try:
            ended = await self._worker.run(self._lifecycle.end_for_exited_process, lease_ids)
        except GpuallocError as exc:
            log.error("ending leases of an exited process failed: %s", exc.message)
            return
        for lease in ended:  # leases freed before their process exited are not listed
            log.info("lease %s ended: its process %s exited", lease.id, lease.pid)
        self._released(ended)

    def _released(self, leases: Sequence[Lease]) -> None:
        if leases:
            self._queue.kick()
