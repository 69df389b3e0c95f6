"""The allocator's façade: the one object the API (and the daemon's housekeeping) calls.

Split by API area: leases (here), the GPUs (`gpus`, desks/gpus.py), the record (`accounting`,
desks/accounting.py), scheduling (`scheduling`, desks/scheduling.py), energy and power
(desks/energy.py, desks/power.py) and owed cleanups (cleanups.py).

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

from gpuallocd.allocator.bells import LeaseBells
from gpuallocd.allocator.cleanups import CleanupDesk, CleanupRunner
from gpuallocd.allocator.desks.accounting import AccountingDesk
from gpuallocd.allocator.desks.energy import EnergyDesk
from gpuallocd.allocator.desks.gpus import GpuDesk
from gpuallocd.allocator.desks.power import PowerDesk
from gpuallocd.allocator.desks.scheduling import SchedulingDesk
from gpuallocd.allocator.leases.health_notice import HealthNotices
from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.parts import SharedParts
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.allocator.long_reads import LongReads
from gpuallocd.allocator.notices import NoticeDesk
from gpuallocd.allocator.notices.desk import DEFAULT_RETENTION_SECONDS
from gpuallocd.allocator.observer import NO_OBSERVER, LeaseObserver, Observers, timed_allocation
from gpuallocd.allocator.power.budget import PowerTerms
from gpuallocd.allocator.preemption import PreemptionDesk
from gpuallocd.allocator.publish import publish
from gpuallocd.allocator.queue.order import QueueOrder
from gpuallocd.allocator.queue.preview import Preview
from gpuallocd.allocator.queue.reclaim import IdleReclaimer
from gpuallocd.allocator.queue.waiting import WaitQueue
from gpuallocd.allocator.site.idle import IdleRules
from gpuallocd.allocator.site.rules import SiteRules
from gpuallocd.allocator.unleased.adoption import Adoption
from gpuallocd.allocator.unleased.guard import UnleasedGuard
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.enforcement import UnleasedRules
from gpuallocd.errors import CallerError, GpuallocError, LedgerError
from gpuallocd.ledger import Ledger
from gpuallocd.model import (
    Caller,
    HistoryEvent,
    Lease,
    LiveState,
    Topology,
)
from gpuallocd.processes.lease_processes import SCAN_SECONDS, TERMINATE, LeaseProcesses
from gpuallocd.processes.tracking import Tracking

__all__ = ["AllocatorFacade"]

log = logging.getLogger(__name__)


class AllocatorFacade(CleanupDesk):
    """Async entry points over one lease lifecycle, its worker, wait queue and process watcher."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        parts: SharedParts,
        ledger: Ledger,
        *,
        clock: Callable[[], float],
        observer: LeaseObserver = NO_OBSERVER,
        idle: IdleRules | None = None,
        revoke_grace_seconds: float = 30.0,
        tracking: Tracking | None = None,
        unleased: UnleasedRules | None = None,
        notice_retention_seconds: float = DEFAULT_RETENTION_SECONDS,
        cleanups: CleanupRunner | None = None,
    ) -> None:
        """`parts`: the shared parts the lifecycle was made with (leases/parts.py): each desk
        below is handed the ones it uses, here and nowhere else. `unleased`: the rules for
        GPU use without a lease (none looked at by default); `cleanups`: the runner of owed
        work (none: nothing owed is ever done, as in tests of the allocator alone)."""
        self._lifecycle = lifecycle
        self._ledger = ledger
        self._clock = clock
        self._quota = parts.quota
        self._default_policy = parts.settings.default_policy
        self.cleanups = cleanups
        self._worker = SerialWorker(
            ledger.unit_of_work, lifecycle.reload, after_commit=self._publish
        )
        order = QueueOrder(parts.settings, ledger, clock)
        self._queue = WaitQueue(
            lifecycle,
            self._worker,
            clock,
            order,
            on_served=lambda: self.preemption.wanted(),
            node=parts.node,
            quota=parts.quota,
            reservations=parts.reservations,
            hardware=parts.hardware,
        )
        self._reads = LongReads(ledger)  # history, accounting: off the loop (long_reads.py)
        self.scheduling = SchedulingDesk(
            lifecycle,
            ledger,
            self._worker,
            self._queue,
            order,
            clock,
            self._reads,
            settings=parts.settings,
            node=parts.node,
            quota=parts.quota,
            drains=parts.drains,
            reservations=parts.reservations,
        )
        self.accounting = AccountingDesk(
            lifecycle,
            ledger,
            self._worker,
            self._reads,
            self._queue,
            clock,
            self.expire_due,
            record_energy=lambda: self.energy.record(),
            quota=parts.quota,
        )
        self.gpus = GpuDesk(
            lifecycle,
            self._worker,
            self._queue,
            clock,
            node=parts.node,
            quota=parts.quota,
            drains=parts.drains,
            reservations=parts.reservations,
        )
        self._reclaimer = IdleReclaimer(
            lifecycle, self._worker, self._queue, idle or IdleRules(), clock, node=parts.node
        )
        # the feed of notices (allocator/notices/): told of each transition after its commit
        self.notices = NoticeDesk(
            lifecycle,
            ledger,
            self._worker,
            clock,
            self._reclaimer.tracker,
            node=parts.node,
            quota=parts.quota,
            reservations=parts.reservations,
            retention_seconds=notice_retention_seconds,
        )
        self._processes = LeaseProcesses(
            self._process_exited,
            revoke_grace_seconds,
            tracking,
            on_gone=self._families_gone,
            active=lifecycle.is_active,
        )
        self.preemption = PreemptionDesk(  # preemptible leases (docs/preemption.md)
            lifecycle,
            ledger,
            self._worker,
            self._queue,
            self.notices,
            self._processes,
            clock,
            quota=parts.quota,
            reservations=parts.reservations,
        )
        self._observer: LeaseObserver = Observers(observer, self.notices, self.preemption)
        self._tasks: set[asyncio.Task[None]] = set()
        self._bells = LeaseBells()
        self.health = HealthNotices(lifecycle, node=parts.node)
        self.energy = EnergyDesk(
            lifecycle, ledger, self._worker, clock, self._reads, hardware=parts.hardware
        )
        self.power = PowerDesk(
            lifecycle, ledger, self._worker, clock=clock, hardware=parts.hardware
        )
        self._adoption = Adoption(
            lifecycle,
            node=parts.node,
            quota=parts.quota,
            drains=parts.drains,
            reservations=parts.reservations,
        )
        self.unleased = UnleasedGuard(
            lifecycle,
            ledger,
            unleased or UnleasedRules("off"),
            clock,
            node=parts.node,
            drains=parts.drains,
            adoption=self._adoption,
        )
        self.revoke_grace_seconds = revoke_grace_seconds
        # the hooks by which the lease hardware calls its desks back: a grant's or an end's
        # energy written soon (desks/energy.py), an ended cap's limit put back (desks/power.py)
        parts.hardware.record_soon = self.energy.record_soon
        parts.hardware.caps.later = self.power.put_back_later

    @property
    def topology(self) -> Topology:
        return self._lifecycle.topology

    @property
    def default_policy(self) -> str:
        """The policy of a request that names none (`default_policy`)."""
        return self._default_policy

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
        if spec.requeue_of is not None:  # a preempted job's requeue keeps its place
            spec = await self._worker.run(self.preemption.requeue_spec, caller, spec)

        def on_grant(lease: Lease) -> None:
            granted.append(lease)
            self._processes.watch(lease)

        try:
            with timed_allocation(self._observer, waited=wait):
                lease = await self._queue.allocate(
                    caller, spec, wait=wait, timeout=timeout, on_grant=on_grant
                )
                await self.power.capped(lease)  # its cap set (desks/power.py)
            await self._processes.enclose(lease)  # in its scope before it hears of the grant
            return lease
        except BaseException as exc:
            for lease in granted:
                self.withdraw(lease, self.power.withdrawn_because(exc))
            raise

    async def preview(self, caller: Caller, spec: AllocateSpec, *, wait: bool) -> Preview:
        """What `allocate` would do now, by its own checks, writing nothing and reading no
        driver (allocator/queue/preview.py)."""
        if spec.requeue_of is not None:
            try:
                spec = await self._worker.run(self.preemption.requeue_spec, caller, spec)
            except CallerError as exc:
                return Preview(self._lifecycle.policy_of(spec), wait, refusal=exc)
        return await self._worker.run(self._queue.preview, caller, spec, wait)

    def withdraw(self, lease: Lease, detail: str | None = None) -> None:
        """Undo a grant whose answer did not reach its client (soon, in order)."""
        self._spawn(self._withdraw(lease.id, detail))

    async def _withdraw(self, lease_id: str, detail: str | None = None) -> None:
        for lease in await self._worker.run(self._lifecycle.withdraw, lease_id, detail):
            log.info("lease %s withdrawn: %s", lease.id, detail or "its answer was not delivered")
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
        self.notices.renewed(lease)
        await self.scan_families()
        return lease

    async def join(self, caller: Caller, lease_id: str) -> Lease:
        """The caller's process (SO_PEERCRED) becomes one of the processes of a bound lease of
        its own: the lease lasts while it, or what it starts, runs (`gpuallocctl run --lease`)."""
        lease = await self._worker.run(self._lifecycle.joinable, caller, lease_id)
        await self._processes.join(lease, caller.pid)
        return lease

    async def free(self, caller: Caller, lease_id: str) -> Lease:
        lease = await self._worker.run(self._lifecycle.free, caller, lease_id)
        self._queue.kick()
        return lease

    async def revoke(self, caller: Caller, lease_id: str, reason: str | None) -> Lease:
        lease, told = await self._worker.run(self._revoke, caller, lease_id, reason)
        self.notices.ring_owners(told)
        self._processes.revoked(lease)
        self._queue.kick()
        return lease

    def _revoke(self, caller: Caller, lease_id: str, reason: str | None) -> tuple[Lease, list[int]]:
        """One call (no sample re-adopts between), one transaction: the revoke, and the
        owner's warning where its processes are stopped after the grace."""
        try:
            with self._ledger.unit_of_work():
                self._quota.require_admin(caller, "revoke leases", lease=lease_id)
                active = self._lifecycle.active(lease_id)
                told: list[int] = []
                grace = self.revoke_grace_seconds
                if active is not None and active.on_revoke == TERMINATE and grace > 0:
                    told = self.notices.warn_revoke(active, grace)  # first, on its stream too
                lease = self.unleased.revoked(self._lifecycle.revoke(caller, lease_id, reason))
        except LedgerError:
            self._lifecycle.reload()
            raise
        return lease, told

    async def lease(self, lease_id: str) -> Lease:
        return await self._worker.run(self._lifecycle.lease, lease_id)

    async def leases(self) -> list[Lease]:
        return await self._worker.run(self._lifecycle.leases)

    async def waiters(self) -> list[dict[str, Any]]:
        """The queue, each waiter with what preemption does for it (allocator/preemption/)."""
        waiters = await self._worker.run(self._queue.waiters)
        for waiter in waiters:
            note = self.preemption.notes.of(waiter["id"])
            if note is not None:
                waiter.update(note.to_json())
                waiter["reason_detail"] = f"{waiter['reason_detail']}; {note.text()}"
                start = waiter["estimated_start_at"]
                if note.start_by() is not None and (start is None or note.start_by() < start):
                    waiter["estimated_start_at"] = note.start_by()
        return waiters

    def idle_notice(self, lease_id: str) -> dict[str, float] | None:
        """For the renew answer: since when the lease is idle and when it may be revoked."""
        return self._reclaimer.notice(lease_id)

    # Site rules: admins, drains, limits, accounting ----------------------------------------

    def reload_rules(
        self, rules: SiteRules, unleased: UnleasedRules, power: PowerTerms | None = None
    ) -> None:
        """Adopt reloaded limits, admin groups, rules for unleased use and the power budget
        (`power`: the budget in watts and the fit; SIGHUP); leases are left as they are,
        users and groups are read afresh; where the budget changed, the waiters are looked
        at again (a budget raised may serve one now)."""
        self._quota.rules = rules
        self.unleased.reload(unleased)
        if power is not None and self.power.adopt_budget(*power):
            self._queue.kick()

    # Housekeeping ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Watch bound leases, their work found again; end those whose work all died."""
        for lease in await self._worker.run(self._lifecycle.bound_leases):
            self._processes.watch(lease)
        gone, has_work = self._processes.start(), self._processes.has_work
        for lease in await self._worker.run(self._lifecycle.reconcile_processes, has_work):
            log.info(
                "lease %s ended: holder %s died while the daemon was down", lease.id, lease.pid
            )
        if gone:
            await self._end_for_exited(gone)
        await self.notices.start()
        await self.preemption.start()  # open preemptions resume with their deadlines

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
        self.notices.ring_sampled()
        self._queue.kick()
        await self._reclaimer.after_sample()
        await self.notices.idle_changed()

    def _after_sample(self) -> list[Lease]:
        """Holders told of failing GPUs; unleased use acted on (the leases it adopted); the
        notices of both, in the same transaction."""
        with self._ledger.unit_of_work():
            unhealthy = self.health.check()
            adopted = self.unleased.check(frozenset(self._queue.holds()))
            self.notices.after_sample(unhealthy)
        return adopted

    async def adopt(self, caller: Caller, pid: int | None, gpu: str | int | None) -> list[Lease]:
        """`gpuallocctl adopt`: the caller's running work on GPUs becomes their leases."""
        return await self._watch_all(await self._worker.run(self._adopt, caller, pid, gpu))

    def _adopt(self, caller: Caller, pid: int | None, gpu: str | int | None) -> list[Lease]:
        held = self._queue.holds()  # for waiters: not the caller's own, already there
        reserved = frozenset(u for u, r in held.items() if r.uid != caller.uid)
        now = self._clock()
        leases = self._adoption.adopt_own(caller, pid=pid, gpu=gpu, now=now, reserved=reserved)
        return self.unleased.covered(leases)

    async def _watch_all(self, leases: list[Lease]) -> list[Lease]:
        for lease in leases:  # adopted: a revoke stops the work (on_revoke "terminate")
            self._processes.watch(lease)
        return leases

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
        self.notices.stop()

    async def close(self) -> None:
        await self.preemption.close()
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
