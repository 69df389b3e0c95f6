"""The allocator's façade: the one object the API (and the daemon's housekeeping) calls.

Each method is one whole operation: it runs the lease lifecycle through the serial worker
(one call at a time, on the event loop, answered after the ledger commit), and does what
must follow. A grant registers the process watch of a bound lease; a lease that ends wakes
the wait queue. Nothing outside this package touches the worker, the queue or the watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from gpuallocd.allocator import gpu_admin
from gpuallocd.allocator.bells import LeaseBells
from gpuallocd.allocator.events_log import write_log
from gpuallocd.allocator.idle import IdleRules
from gpuallocd.allocator.lease_processes import SCAN_SECONDS, LeaseProcesses
from gpuallocd.allocator.lifecycle import LeaseLifecycle
from gpuallocd.allocator.node_view import GpuStatus
from gpuallocd.allocator.observer import NO_OBSERVER, LeaseObserver, timed_allocation
from gpuallocd.allocator.reclaim import IdleReclaimer
from gpuallocd.allocator.site_rules import SiteRules
from gpuallocd.allocator.specs import AllocateSpec
from gpuallocd.allocator.waitqueue import WaitQueue
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.errors import GpuallocError, UnknownLease
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
)

__all__ = ["AllocatorFacade"]

log = logging.getLogger(__name__)

T = TypeVar("T")

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
        revoke_grace_seconds: float = 30.0,
    ) -> None:
        self._lifecycle = lifecycle
        self._ledger = ledger
        self._clock = clock
        self._observer = observer
        self._worker = SerialWorker(
            ledger.unit_of_work, lifecycle.reload, after_commit=self._publish
        )
        self._queue = WaitQueue(lifecycle, self._worker, clock)
        self._reclaimer = IdleReclaimer(
            lifecycle, self._worker, self._queue, idle or IdleRules(), clock
        )
        self._processes = LeaseProcesses(self._process_exited, revoke_grace_seconds)
        self._tasks: set[asyncio.Task[None]] = set()
        self._bells = LeaseBells()
        self.revoke_grace_seconds = revoke_grace_seconds
        # Long reads (history, accounting): a read-only connection in a thread of their own,
        # so no read of one user holds another's request on the event loop.
        self._reader = ledger.reader()
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-read")

    @property
    def topology(self) -> Topology:
        return self._lifecycle.topology

    def _publish(self) -> None:
        """The transitions the last commit made durable. The observer is told at once, before
        their callers hear (a CDI spec names a lease before its holder may use the name); the
        log lines are written once the callers' answers are out. Those who wait for news of
        a lease are woken."""
        transitions, news = self._lifecycle.take_journal()
        self._bells.ring(news)
        if not transitions:
            return
        for transition in transitions:
            if transition.event is LeaseEvent.GRANTED:
                self._observer.lease_granted(transition.lease)
            else:
                self._observer.lease_ended(transition.lease)
        self._observer.commit_published()
        asyncio.get_running_loop().call_soon(write_log, transitions)

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
            self._processes.watch(lease, terminate=spec.on_revoke == "terminate")

        try:
            with timed_allocation(self._observer, waited=wait):
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

    def process_tracking(self) -> str:
        """How a bound lease's processes are followed: the holder by pidfd, the processes it
        starts by scanning /proc."""
        return "proc-scan"

    def processes_of(self, lease_id: str) -> list[int]:
        """The pids a bound lease covers now: its holder and the processes started under it."""
        return self._processes.members(lease_id)

    async def lease_events(
        self, lease_id: str, after: int, wait_seconds: float
    ) -> tuple[Lease, list[HistoryEvent]]:
        """The lease and its events numbered above `after`; with none yet and the lease
        active, wait up to `wait_seconds` for one (a long poll)."""
        bell = self._bells.listen(lease_id)  # before the read: no news can slip between
        try:
            lease, events = await self._worker.run(self._lease_news, lease_id, after)
            if events or not lease.active or wait_seconds <= 0:
                return lease, events
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(bell), wait_seconds)
        finally:
            self._bells.forget(lease_id, bell)
        return await self._worker.run(self._lease_news, lease_id, after)

    def _lease_news(self, lease_id: str, after: int) -> tuple[Lease, list[HistoryEvent]]:
        return self._lifecycle.lease(lease_id), self._ledger.events_after(lease_id, after)

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
        self._processes.revoked(lease)
        self._queue.kick()
        return lease

    async def release_gpu(self, caller: Caller, ref: str | int) -> GpuStatus:
        """Root's override for a GPU its former holder's processes keep draining."""
        status = await self._worker.run(gpu_admin.release, self._lifecycle, caller, ref)
        self._queue.kick()
        return status

    async def lease(self, lease_id: str) -> Lease:
        return await self._worker.run(self._lifecycle.lease, lease_id)

    async def leases(self) -> list[Lease]:
        return await self._worker.run(self._lifecycle.leases)

    async def gpu_status(self) -> list[GpuStatus]:
        """Every GPU; free ones held for a waiter show as reserved."""
        return await self._worker.run(self._gpu_status)

    def _gpu_status(self) -> list[GpuStatus]:
        return self._lifecycle.gpu_status(self._queue.reservations())

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a long read in the reads thread, on the read-only connection."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reads, functools.partial(fn, *args))

    async def history(self, lease_id: str | None, limit: int) -> list[HistoryEvent]:
        """The last `limit` events (of one lease where given), read off the event loop."""
        return await self._off_loop(self._history, lease_id, limit)

    async def history_json(self, lease_id: str | None, limit: int) -> bytes:
        """`history` as the API's JSON document, read and rendered off the event loop."""
        return await self._off_loop(self._history_json, lease_id, limit)

    def _history(self, lease_id: str | None, limit: int) -> list[HistoryEvent]:
        events = self._reader.history(lease_id, limit)
        if lease_id is not None and not events and not self._reader.has_lease(lease_id):
            raise UnknownLease(f"no lease {lease_id!r}", lease=lease_id)
        return events

    def _history_json(self, lease_id: str | None, limit: int) -> bytes:
        events = self._reader.history_json(lease_id, limit)
        if lease_id is not None and events == "[]" and not self._reader.has_lease(lease_id):
            raise UnknownLease(f"no lease {lease_id!r}", lease=lease_id)
        return b'{"events": ' + events.encode() + b"}"

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
        return await self._worker.run(
            gpu_admin.drain, self._lifecycle, caller, refs, reason, self._clock()
        )

    async def undrain(self, caller: Caller, refs: Sequence[str | int]) -> list[GpuStatus]:
        statuses = await self._worker.run(
            gpu_admin.undrain, self._lifecycle, caller, refs, self._clock()
        )
        self._queue.kick()
        return statuses

    async def limits(self, subject: Caller) -> dict[str, Any]:
        waiting = self._queue.waiting_of(subject.uid)
        return await self._worker.run(self._limits_report, subject, waiting)

    def _limits_report(self, subject: Caller, waiting: int) -> dict[str, Any]:
        """The limits that apply to `subject` and their current use (`gpuallocctl limits`)."""
        return self._lifecycle.quota.report(subject, self._lifecycle.leases(), waiting)

    async def usage(
        self, since: float, until: float | None, user: str | None
    ) -> tuple[float, list[UserUsage]]:
        """The window's end (now by default), and each user's GPU-hours, leases and waiting
        time inside [since, end]; only `user` (a name or a uid) where given."""
        await self.expire_due()  # a lease past its TTL is charged up to its expiry, no more
        end = self._clock() if until is None else until
        found = await self._off_loop(self._reader.usage, since, end)
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
            self._processes.watch(lease)

    async def expire_due(self) -> list[Lease]:
        """End leases whose TTL ran out, and stop watching processes of ended leases."""
        expired = await self._worker.run(self._lifecycle.expire_due)  # logged: events_log
        self._released(expired)
        bound = await self._worker.run(self._lifecycle.bound_leases)
        self._processes.retain(lease.id for lease in bound)
        return expired

    async def update_live(self, states: Mapping[str, LiveState]) -> None:
        """A new live sample; a GPU may have come back to health, so serve the queue."""
        await self._worker.run(self._lifecycle.update_live, states)
        self._queue.kick()
        await self._reclaimer.after_sample()

    async def poll_processes(self) -> None:
        """Watch holders that have no pidfd, and the families of bound leases, by reading
        /proc once a second (runs until cancelled)."""
        await asyncio.gather(self._processes.poll_forever(), self._scan_forever())

    async def _scan_forever(self) -> None:
        while True:
            await asyncio.sleep(SCAN_SECONDS)
            await self.scan_families()

    async def scan_families(self) -> None:
        """Grow the families of bound leases from /proc; end the leases whose are all gone."""
        emptied = await self._processes.scan()
        if emptied:
            await self._end_for_exited(emptied)

    def stop_waiting(self) -> None:
        """The daemon stops: release the waiting requests and long polls at once (their
        clients ask again)."""
        self._queue.release_all()
        self._bells.ring_all()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._processes.close()
        await self._worker.close()
        self._reads.shutdown(wait=True)
        self._reader.close()
        await asyncio.sleep(0)  # the last transitions' log lines (written after the answers)

    def _process_exited(self, lease_ids: list[str]) -> None:
        """A holder exited: its lease ends if no process started under it still runs."""
        self._spawn(self._holder_exited(lease_ids))

    async def _holder_exited(self, lease_ids: list[str]) -> None:
        untracked = self._processes.untracked(lease_ids)
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
        # Logged by events_log; leases freed before their process exited are not listed.
        self._released(ended)

    def _released(self, leases: Sequence[Lease]) -> None:
        if leases:
            self._queue.kick()
