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

from gpuallocd.allocator.events_log import JournalWorker, Transition, write_log
from gpuallocd.allocator.idle import IdleRules
from gpuallocd.allocator.lifecycle import LeaseLifecycle
from gpuallocd.allocator.node_view import GpuStatus
from gpuallocd.allocator.observer import NO_OBSERVER, LeaseObserver, timed_allocation
from gpuallocd.allocator.reclaim import IdleReclaimer
from gpuallocd.allocator.site_rules import SiteRules
from gpuallocd.allocator.specs import AllocateSpec
from gpuallocd.allocator.waitqueue import WaitQueue
from gpuallocd.allocator.watcher import ProcessWatcher
from gpuallocd.errors import GpuallocError
from gpuallocd.ledger import Ledger
from gpuallocd.model import (
    AdminAction,
    Caller,
    HistoryEvent,
    Lease,
    LeaseEvent,
    LiveState,
    Topology,
    UserUsage,
    usage_by_user,
)

__all__ = ["AllocatorFacade"]

log = logging.getLogger(__name__)

PURGE_BATCH = 200  # leases per purge transaction: a few milliseconds of the writer's time
PURGE_PAUSE = 0.01


class AllocatorFacade:
    """Async entry points over one lease lifecycle, its worker, wait queue and process watcher."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        ledger: Ledger,
        *,
        clock: Callable[[], float],
        observer: LeaseObserver = NO_OBSERVER,
        idle: IdleRules | None = None,
    ) -> None:
        self._lifecycle = lifecycle
        self._ledger = ledger
        self._clock = clock
        self._observer = observer
        self._worker = JournalWorker(
            lifecycle.take_journal, self._publish, ledger.unit_of_work, lifecycle.reload
        )
        self._queue = WaitQueue(lifecycle, self._worker, clock)
        self._reclaimer = IdleReclaimer(
            lifecycle, self._worker, self._queue, idle or IdleRules(), clock
        )
        self._watcher = ProcessWatcher(self._process_exited)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def topology(self) -> Topology:
        return self._lifecycle.topology

    def _publish(self, transitions: list[Transition]) -> None:
        """Durable transitions: one log line each, and the observer told."""
        write_log(transitions)
        for transition in transitions:
            if transition.event is LeaseEvent.GRANTED:
                self._observer.lease_granted(transition.lease)
            else:
                self._observer.lease_ended(transition.lease)

    # Requests -------------------------------------------------------------------------------

    async def allocate(
        self, caller: Caller, spec: AllocateSpec, *, wait: bool = False, timeout: float | None
    ) -> Lease:
        """Grant now, or queue when `wait`; a bound lease is watched from the moment of grant."""
        with timed_allocation(self._observer, waited=wait):
            lease = await self._queue.allocate(caller, spec, wait=wait, timeout=timeout)
        self._watcher.watch(lease)
        return lease

    async def renew(self, caller: Caller, lease_id: str, ttl_seconds: float | None) -> Lease:
        return await self._worker.run(self._lifecycle.renew, caller, lease_id, ttl_seconds)

    async def free(self, caller: Caller, lease_id: str) -> Lease:
        lease = await self._worker.run(self._lifecycle.free, caller, lease_id)
        self._queue.kick()
        return lease

    async def revoke(self, caller: Caller, lease_id: str, reason: str | None) -> Lease:
        lease = await self._worker.run(self._lifecycle.revoke, caller, lease_id, reason)
        self._queue.kick()
        return lease

    async def lease(self, lease_id: str) -> Lease:
        return await self._worker.run(self._lifecycle.lease, lease_id)

    async def leases(self) -> list[Lease]:
        return await self._worker.run(self._lifecycle.leases)

    async def gpu_status(self) -> list[GpuStatus]:
        """Every GPU; free ones held for a waiter show as reserved."""
        return await self._worker.run(self._gpu_status)

    def _gpu_status(self) -> list[GpuStatus]:
        return self._lifecycle.gpu_status(self._queue.reservations())

    async def history(self, lease_id: str | None, limit: int) -> list[HistoryEvent]:
        return await self._worker.run(self._lifecycle.history, lease_id, limit)

    async def waiters(self) -> list[dict[str, Any]]:
        return await self._worker.run(self._queue.waiters)

    def idle_notice(self, lease_id: str) -> dict[str, float] | None:
        """For the renew answer: since when the lease is idle and when it may be revoked."""
        return self._reclaimer.notice(lease_id)

    # Site rules: admins, drains, limits, accounting ----------------------------------------

    def set_rules(self, rules: SiteRules) -> None:
        """Adopt reloaded limits and admin groups; leases and waiters are left as they are."""
        self._lifecycle.quota.rules = rules

    async def drain(
        self, caller: Caller, refs: Sequence[str | int], reason: str
    ) -> list[GpuStatus]:
        return await self._worker.run(self._lifecycle.drain, caller, refs, reason)

    async def undrain(self, caller: Caller, refs: Sequence[str | int]) -> list[GpuStatus]:
        statuses = await self._worker.run(self._lifecycle.undrain, caller, refs)
        self._queue.kick()
        return statuses

    async def limits(self, subject: Caller) -> dict[str, Any]:
        waiting = self._queue.waiting_of(subject.uid)
        return await self._worker.run(self._lifecycle.limits_report, subject, waiting)

    async def usage(
        self, since: float, until: float | None, user: str | None
    ) -> tuple[float, list[UserUsage]]:
        """The window's end (now by default), and each user's GPU-hours, leases and waiting
        time inside [since, end]; only `user` (a name or a uid) where given."""
        end = self._clock() if until is None else until
        spans = await self._worker.run(self._ledger.lease_spans, since, end)
        found = usage_by_user(spans, since, end)
        if user is not None:
            found = [u for u in found if user in (u.user, str(u.uid))]
        return end, found

    async def admin_actions(self, limit: int) -> list[AdminAction]:
        return await self._worker.run(self._ledger.admin_actions, limit)

    async def purge_history(
        self, retention_seconds: float, batch: int = PURGE_BATCH, pause: float = PURGE_PAUSE
    ) -> int:
        """Delete leases that ended more than `retention_seconds` ago, `batch` at a time with
        `pause` seconds between batches, so a long purge never stalls requests."""
        cutoff = self._clock() - retention_seconds
        purged = 0
        while True:
            done = await self._worker.run(self._ledger.purge_before, cutoff, batch)
            purged += done
            if done < batch:
                return purged
            await asyncio.sleep(pause)  # requests run between batches

    async def adopt_topology(self, topology: Topology) -> Topology:
        """Take a rediscovered topology; GPUs that came back may serve the queue. Leases of
        MIG instances that vanished end (revoked, with the reason in their history)."""
        ended = await self._worker.run(self._lifecycle.set_topology, topology)
        for lease in ended:
            log.warning(
                "lease %s of %s ended: its MIG instance vanished", lease.id, lease.owner_name
            )
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
            self._watcher.watch(lease)

    async def expire_due(self) -> list[Lease]:
        """End leases whose TTL ran out, and stop watching processes of ended leases."""
        expired = await self._worker.run(self._lifecycle.expire_due)  # logged: events_log
        self._released(expired)
        bound = await self._worker.run(self._lifecycle.bound_leases)
        self._watcher.retain(lease.id for lease in bound)
        return expired

    async def update_live(self, states: Mapping[str, LiveState]) -> None:
        """A new live sample; a GPU may have come back to health, so serve the queue."""
        await self._worker.run(self._lifecycle.update_live, states)
        self._queue.kick()
        await self._reclaimer.after_sample()

    async def poll_processes(self) -> None:
        """Watch processes that have no pidfd by polling /proc (runs until cancelled)."""
        await self._watcher.poll_forever()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._watcher.close()
        self._worker.close()

    def _process_exited(self, lease_ids: list[str]) -> None:
        self._spawn(self._end_for_exited(lease_ids))

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
        # Logged by events_log; leases freed before their process exited are not listed.
        self._released(ended)

    def _released(self, leases: Sequence[Lease]) -> None:
        if leases:
            self._queue.kick()
