"""The allocator's façade: the one object the API (and the daemon's housekeeping) calls.

Each method is one whole operation: it runs the lease lifecycle through the serial worker
(one call at a time, on the event loop, answered after the ledger commit), and does what
must follow. A grant registers the process watch of a bound lease; a lease that ends wakes
the wait queue. Nothing outside this package touches the worker, the queue or the watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from gpuallocd.allocator import gpu_admin
from gpuallocd.allocator.adoption import adopt_own
from gpuallocd.allocator.bells import LeaseBells
from gpuallocd.allocator.energy_desk import EnergyDesk
from gpuallocd.allocator.health_notice import HealthNotices
from gpuallocd.allocator.idle import IdleRules
from gpuallocd.allocator.lifecycle import LeaseLifecycle
from gpuallocd.allocator.long_reads import LongReads
from gpuallocd.allocator.node_view import GpuStatus
from gpuallocd.allocator.observer import NO_OBSERVER, LeaseObserver, timed_allocation
from gpuallocd.allocator.power_desk import PowerDesk
from gpuallocd.allocator.publish import publish
from gpuallocd.allocator.purge import purge_before
from gpuallocd.allocator.queue_order import QueueOrder
from gpuallocd.allocator.reclaim import IdleReclaimer
from gpuallocd.allocator.reserve import held_for_status
from gpuallocd.allocator.scheduling_desk import SchedulingDesk
from gpuallocd.allocator.site_rules import SiteRules
from gpuallocd.allocator.specs import AllocateSpec
from gpuallocd.allocator.unleased import UnleasedGuard
from gpuallocd.allocator.waitqueue import WaitQueue
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.enforcement import UnleasedRules
from gpuallocd.errors import GpuallocError
from gpuallocd.ledger import Ledger
from gpuallocd.model import AdminAction, Caller, HistoryEvent, Lease, LiveState, Topology, UserUsage
from gpuallocd.processes.lease_processes import SCAN_SECONDS, LeaseProcesses
from gpuallocd.processes.tracking import Tracking

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
        observer: LeaseObserver = NO_OBSERVER,
        idle: IdleRules | None = None,
        revoke_grace_seconds: float = 30.0,
        tracking: Tracking | None = None,
        unleased: UnleasedRules | None = None,
    ) -> None:
        """`unleased`: the rules for GPU use without a lease (none looked at by default)."""
        self._lifecycle = lifecycle
        self._ledger = ledger
        self._clock = clock
        self._observer = observer
        self._worker = SerialWorker(
            ledger.unit_of_work, lifecycle.reload, after_commit=self._publish
        )
        order = QueueOrder(lifecycle.settings, ledger, clock)
        self._queue = WaitQueue(lifecycle, self._worker, clock, order)
        self._reads = LongReads(ledger)  # history, accounting: off the loop (long_reads.py)
        self.scheduling = SchedulingDesk(
            lifecycle, ledger, self._worker, self._queue, order, clock, self._reads
        )
        self._reclaimer = IdleReclaimer(
            lifecycle, self._worker, self._queue, idle or IdleRules(), clock
        )
        self._processes = LeaseProcesses(
            self._process_exited, revoke_grace_seconds, tracking, on_gone=self._families_gone
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._bells = LeaseBells()
        self.health = HealthNotices(lifecycle)
        self.energy = EnergyDesk(lifecycle, ledger, self._worker, clock, self._reads)
        self.power = PowerDesk(lifecycle, ledger, self._worker)  # caps: power_desk.py
        self.unleased = UnleasedGuard(lifecycle, ledger, unleased or UnleasedRules("off"), clock)
        self.revoke_grace_seconds = revoke_grace_seconds

    @property
    def topology(self) -> Topology:
        return self._lifecycle.topology

    def _publish(self) -> None:
        publish(self._lifecycle.take_journal(), self._bells, self._observer)  # publish.py

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
                lease = await self._queue.allocate(
                    caller, spec, wait=wait, timeout=timeout, on_grant=on_grant
                )
            await self._processes.enclose(lease)  # in its scope before it hears of the grant
            return lease
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
        """How the processes a bound lease's holder starts are followed: `connector` (the
        kernel's process events), `scope` (a systemd scope per lease) or `proc-scan` (/proc
        read once a second)."""
        return self._processes.mode

    def process_tracking_stats(self) -> dict[str, Any]:
        """The mode, why it is in force, and what the kernel's events did."""
        return self._processes.stats()

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
        held = held_for_status(self._lifecycle, self._clock())
        return self._lifecycle.gpu_status({**self._queue.reservations(), **held})

    async def history(self, lease_id: str | None, limit: int) -> list[HistoryEvent]:
        return await self._reads.history(lease_id, limit)  # off the event loop: long_reads.py

    async def history_json(
        self, lease_id: str | None, limit: int, user_name: Callable[[int], str]
    ) -> bytes:
        return await self._reads.history_json(lease_id, limit, user_name)

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
        found = await self._reads.usage(since, end)
        if user is not None:
            found = [u for u in found if user in (u.user, str(u.uid))]
        return end, found

    async def admin_actions(self, limit: int) -> list[AdminAction]:
        return await self._worker.run(self._ledger.admin_actions, limit)

    async def purge_history(self, retention_seconds: float) -> int:
        """Delete what ended more than `retention_seconds` ago, in batches (purge.py)."""
        return await purge_before(self._worker, self._ledger, self._clock() - retention_seconds)

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
        gone = self._processes.start()
        if gone:
            await self._end_for_exited(gone)

    async def expire_due(self) -> list[Lease]:
        """End leases whose TTL ran out, and stop watching processes of ended leases."""
        expired = await self._worker.run(self._lifecycle.expire_due)  # logged: events_log
        await self.scheduling.tick()
        self._released(expired)
        bound = await self._worker.run(self._lifecycle.bound_leases)
        self._processes.retain(lease.id for lease in bound)
        return expired

    async def update_live(self, states: Mapping[str, LiveState]) -> None:
        """A new live sample; a GPU may have come back to health, so serve the queue."""
        await self._worker.run(self._lifecycle.update_live, states)
        await self._watch_all(await self._worker.run(self._after_sample))
        self._queue.kick()
        await self._reclaimer.after_sample()

    def _after_sample(self) -> list[Lease]:
        """Holders told of failing GPUs; unleased use acted on (the leases it adopted)."""
        self.health.check()
        return self.unleased.check(frozenset(self._queue.reservations()))

    async def adopt(self, caller: Caller, pid: int | None, gpu: str | int | None) -> list[Lease]:
        """`gpuallocctl adopt`: the caller's running work on GPUs becomes their leases."""
        return await self._watch_all(await self._worker.run(self._adopt, caller, pid, gpu))

    def _adopt(self, caller: Caller, pid: int | None, gpu: str | int | None) -> list[Lease]:
        reserved = frozenset(self._queue.reservations())
        now = self._clock()
        leases = adopt_own(self._lifecycle, caller, pid=pid, gpu=gpu, now=now, reserved=reserved)
        return self.unleased.covered(leases)

    async def _watch_all(self, leases: list[Lease]) -> list[Lease]:
        for lease in leases:
            self._processes.watch(lease)
        return leases

    async def unleased_history(self, limit: int) -> list[dict[str, Any]]:
        return await self._worker.run(self._ledger.unleased_events, limit)

    async def poll_processes(self) -> None:
        """Watch holders that have no pidfd, and the families of bound leases, by reading
        /proc once a second (runs until cancelled)."""
        await asyncio.gather(self._processes.poll_forever(), self._scan_forever())

    async def _scan_forever(self) -> None:
        while await asyncio.sleep(SCAN_SECONDS, True):
            await self.scan_families()

    async def scan_families(self) -> None:
        """Grow the families of bound leases from /proc; end the leases whose are all gone."""
        emptied = await self._processes.scan()
        if emptied:
            await self._end_for_exited(emptied)

    def stop_waiting(self) -> None:
        """The daemon stops: waiting requests and long polls end now (clients ask again)."""
        self._queue.release_all()
        self._bells.ring_all()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._processes.close()
        await self._worker.close()
        self._reads.close()
        await asyncio.sleep(0)  # the last transitions' log lines (written after the answers)

    def _process_exited(self, lease_ids: list[str]) -> None:
        """A holder exited: its lease ends if no process started under it still runs."""
        self._spawn(self._holder_exited(lease_ids))

    def _families_gone(self, lease_ids: list[str]) -> None:
        self._spawn(self._end_for_exited(lease_ids))  # the kernel told of their last exit

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
