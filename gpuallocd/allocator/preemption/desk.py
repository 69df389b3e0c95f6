"""The façade's part for preemption (docs/preemption.md): who is preempted and when, the
contract's steps on the daemon's clock, acknowledgements, and a restart's resume.

Decisions come from the one rule (policies/preemption.py) over a snapshot (snapshot.py):
for the waiters, each time the queue was served and some still wait and when a lease's
minimum runtime passes; for an advance reservation as its start comes near; for an admin.
A decision is recorded in one transaction: the preemption with its deadline, the
`preempt_warning` event on the lease's stream and its owner's notice; the owner's further
warnings come from the notices' timer. Then, on the monotonic clock: the chosen signal at the
end of the lead (its holder hears it on the stream), and at the deadline SIGKILL to what is
left and the lease's end (`preempted`). An acknowledged checkpoint ends the lease at once.
A restart reads the open preemptions back with their deadlines (book.py).

Also a lease observer: a grant starts a preemptible lease's clock, an end forgets it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import replace
from typing import Any

from gpuallocd.allocator.crash_points import crash_point
from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.allocator.notices.ahead import Deadline
from gpuallocd.allocator.notices.desk import NoticeDesk
from gpuallocd.allocator.preemption import contract
from gpuallocd.allocator.preemption.book import OpenPreemption, PreemptionBook
from gpuallocd.allocator.preemption.requeue import requeue_spec
from gpuallocd.allocator.preemption.snapshot import (
    candidate_of,
    candidates,
    free_units,
    requests,
)
from gpuallocd.allocator.preemption.views import PlanNotes, gpu_marks, lease_extra
from gpuallocd.allocator.queue.waiting import WaitQueue
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.site.reservation_board import ReservationBoard, caller_of_uid
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.errors import (
    LeaseNotActive,
    LedgerError,
    NotPreemptible,
    PermissionDenied,
    WithinMinimumRuntime,
)
from gpuallocd.ledger import Ledger
from gpuallocd.model import (
    Caller,
    Lease,
    LeaseEvent,
    LeaseState,
    Preemption,
    PreemptionState,
    PreemptTrigger,
)
from gpuallocd.policies.preemption import admin_decision, plan_queue, reservation_victims
from gpuallocd.processes.lease_processes import LeaseProcesses

__all__ = ["EXIT_SECONDS_AFTER_ACK", "PreemptionDesk"]

log = logging.getLogger(__name__)

EXIT_SECONDS_AFTER_ACK = (
    2.0  # what is left of a lease this long after its acknowledgement is killed
)
PROGRESS_NOTE_SECONDS = 60.0  # a checkpoint outside a preemption: one history line a minute


class PreemptionDesk:
    """Preemptions decided, carried out and resumed; checkpoints acknowledged."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        ledger: Ledger,
        worker: SerialWorker,
        queue: WaitQueue,
        notices: NoticeDesk,
        processes: LeaseProcesses,
        clock: Callable[[], float],
        *,
        quota: Quota,
        reservations: ReservationBoard,
    ) -> None:
        """The parts it reads: the quota's admin groups (who may preempt), the reservations
        whose start preempts what runs on their GPUs."""
        self._lifecycle = lifecycle
        self._quota = quota
        self._board = reservations
        self._ledger = ledger
        self._worker = worker
        self._queue = queue
        self._notices = notices
        self._processes = processes
        self._clock = clock
        self._monotonic = lifecycle.monotonic
        self.book = PreemptionBook(clock, lifecycle.monotonic)
        self.notes = PlanNotes()
        self._busy: set[str] = set()  # leases with a step in flight
        self._planning: asyncio.Task[None] | None = None
        self._plan_again = False
        self._replan_at: float | None = None  # monotonic: a minimum runtime passes
        self._progress_noted: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.counts: dict[tuple[str, str], int] = {}  # (trigger, outcome) -> preemptions ended

    # A lease observer (allocator/observer.py): after the commit --------------------------------

    def lease_granted(self, lease: Lease) -> None:
        self.book.track(lease)
        if lease.preemptible is not None and self._queue.waiting():
            self.wanted()  # a candidate for those who wait, once its minimum runtime passes

    def lease_ended(self, lease: Lease) -> None:
        self._progress_noted.pop(lease.id, None)
        entry = self.book.forget(lease.id)
        if entry is not None and lease.state is not LeaseState.PREEMPTED:
            self._spawn(self._close(entry, lease))  # freed, exited, expired or revoked meanwhile

    def commit_published(self) -> None:
        return None

    def allocation_finished(self, seconds: float, *, waited: bool, outcome: str) -> None:
        return None

    # Start and the timer ------------------------------------------------------------------------

    async def start(self) -> None:
        """Read the preemptible leases and the open preemptions back: each resumes with the
        deadline it was given (the time left by the wall clock, from now on)."""
        leases = await self._worker.run(self._lifecycle.leases)
        for lease in leases:
            self.book.track(lease)
        tracked = self.book.tracked()
        for lease_id, (at, path) in (
            await self._worker.run(self._ledger.last_checkpoints, tracked)
        ).items():
            self.book.checkpointed(lease_id, at, path)
        for record in await self._worker.run(self._ledger.open_preemptions):
            held = self._lifecycle.active(record.lease_id)
            if held is None:
                continue
            self.book.open(record)
            self._arm(held, record)
            log.info(
                "preemption of lease %s resumed: deadline %s",
                record.lease_id,
                contract.at_clock(record.deadline_at),
            )
        self.wanted()

    async def tick(self) -> None:
        """What is due on the monotonic clock: signals, deadlines, reservations about to
        start, and waiters whose victims' minimum runtime has passed."""
        for entry in self.book:
            lease_id = entry.record.lease_id
            if lease_id in self._busy:
                continue
            if self.book.deadline_passed(entry):
                await self._step(lease_id, self._deadline(entry))
            elif self.book.signal_due(entry):
                await self._step(lease_id, self._signal(entry))
        if self.book.tracked() and self._board.live(self._clock()):
            begun = await self._worker.run(self._plan_reservations)
            await self._after_begin(begun)
        due = self._replan_at
        if due is not None and self._monotonic() >= due:
            self._replan_at = None
            self.wanted()

    async def _step(self, lease_id: str, step: Coroutine[Any, Any, None]) -> None:
        self._busy.add(lease_id)
        try:
            await step
        except LedgerError as exc:
            log.error("preemption of lease %s: %s (tried again at the next tick)", lease_id, exc)
            await self._resync()
        finally:
            self._busy.discard(lease_id)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One transaction; where its commit fails, the lifecycle reads the ledger again."""
        try:
            with self._ledger.unit_of_work():
                yield
        except LedgerError:
            self._lifecycle.reload()
            raise

    # Decisions: waiters, reservations, admins ---------------------------------------------------

    def wanted(self) -> None:
        """The queue was served and some still wait: plan (soon, one plan at a time). With
        no preemptible lease there is nothing to plan: nothing is done at all."""
        if not self.book.tracked():
            self.notes.clear()
            return
        if self._planning is not None and not self._planning.done():
            self._plan_again = True
            return
        self._planning = asyncio.get_running_loop().create_task(self._plan())

    async def _plan(self) -> None:
        self._plan_again = True
        while self._plan_again:
            self._plan_again = False
            try:
                begun = await self._worker.run(self._plan_waiters)
            except LedgerError as exc:
                log.error("preemption for waiters failed: %s", exc)
                await self._resync()
                return
            await self._after_begin(begun)

    def _plan_waiters(self) -> list[tuple[Lease, Preemption]]:
        """Runs in the worker: the rule over the waiters in order; what it preempts now is
        recorded in one transaction."""
        waiters = [w for w in self._queue.arranged() if not w.future.done()]
        if not waiters or not self.book.tracked():
            self.notes.clear()
            self._replan_at = None
            return []
        wanted = requests(self._lifecycle, waiters)
        plans = plan_queue(
            wanted, free_units(self._lifecycle), candidates(self._lifecycle, self.book)
        )
        self.notes.planned(plans, self._clock(), self.book)
        later = [p.later_in for p in plans if p.later_in is not None]
        self._replan_at = self._monotonic() + min(later) if later else None
        by_id = {r.id: r for r in wanted}
        begun: list[tuple[Lease, Preemption]] = []
        with self._transaction():
            for plan in plans:
                request = by_id[plan.request_id]
                for victim, why in plan.reasons:
                    lease = self._lifecycle.active(victim.lease_id)
                    if lease is not None:
                        trigger = PreemptTrigger.REQUEST
                        begun.append(
                            self._begin(lease, trigger, request.owner, request.owner_uid, why)
                        )
        return begun

    def _plan_reservations(self) -> list[tuple[Lease, Preemption]]:
        """Runs in the worker: preemptible leases on the GPUs of a reservation about to start,
        each as late as its notice allows."""
        now = self._clock()
        live = self._board.live(now)
        begun: list[tuple[Lease, Preemption]] = []
        if not live:
            return begun
        found = candidates(self._lifecycle, self.book, by_gpu=True)
        with self._transaction():
            for reservation in live:
                others = [
                    c
                    for c in found
                    if not reservation.admits(caller_of_uid(c.owner_uid))
                    and c.lease_id not in {p.lease_id for _, p in begun}
                ]
                starts_in = reservation.start_at - now
                units = frozenset(reservation.gpus)
                for victim, why in reservation_victims(
                    reservation.id, reservation.holder, units, starts_in, others
                ):
                    lease = self._lifecycle.active(victim.lease_id)
                    if lease is not None:
                        trigger = PreemptTrigger.RESERVATION
                        begun.append(
                            self._begin(lease, trigger, f"reservation {reservation.id}", None, why)
                        )
        return begun

    async def preempt(self, caller: Caller, lease_id: str, reason: str | None) -> Preemption:
        """`gpuallocctl preempt LEASE` (admins): the contract starts now, once the lease's
        minimum runtime has passed (`within_minimum_runtime` before)."""
        begun, record = await self._worker.run(self._admin_preempt, caller, lease_id, reason)
        await self._after_begin(begun)
        return record

    def _admin_preempt(
        self, caller: Caller, lease_id: str, reason: str | None
    ) -> tuple[list[tuple[Lease, Preemption]], Preemption]:
        self._quota.require_admin(caller, "preempt leases", lease=lease_id)
        lease = self._active(lease_id)
        if lease.preemptible is None:
            raise NotPreemptible(
                f"lease {lease_id} was not granted preemptible (a revoke ends any lease)",
                lease=lease_id,
            )
        entry = self.book.get(lease_id)
        if entry is not None:
            return [], entry.record  # already under way: the same preemption
        decision = admin_decision(candidate_of(lease, self.book), caller.user)
        if not decision.allowed:
            at = self._clock() + decision.wait_seconds
            raise WithinMinimumRuntime(
                f"{decision.explanation}: it may be preempted from {contract.at_clock(at)}",
                lease=lease_id,
                preemptible_at=at,
            )
        why = decision.explanation + (f" ({reason})" if reason else "")
        with self._transaction():
            begun = self._begin(lease, PreemptTrigger.ADMIN, caller.user, caller.uid, why)
            self._ledger.record_preempt(lease_id, caller.uid, caller.user, self._clock(), reason)
        return [begun], begun[1]

    def _begin(
        self, lease: Lease, trigger: PreemptTrigger, for_user: str, for_uid: int | None, why: str
    ) -> tuple[Lease, Preemption]:
        """In the worker, inside a unit of work: the preemption, its warning on the lease's
        stream and its owner's notice."""
        terms = lease.preemptible
        assert terms is not None
        now = self._clock()
        record = Preemption(
            lease_id=lease.id,
            owner_uid=lease.owner_uid,
            owner_name=lease.owner_name,
            trigger=trigger,
            for_user=for_user,
            for_uid=for_uid,
            explanation=why,
            decided_at=now,
            signal_at=now + terms.lead_seconds,
            deadline_at=now + terms.notice_seconds,
            signal=terms.signal,
        )
        self._ledger.add_preemption(record)
        self._lifecycle.note(lease.id, LeaseEvent.PREEMPT_WARNING, contract.warning_detail(record))
        self._ledger.add_notices([contract.first_notice(lease, record, now)])
        self.book.open(record, lead=terms.lead_seconds, grace=terms.grace_seconds)
        return lease, record

    async def _after_begin(self, begun: Sequence[tuple[Lease, Preemption]]) -> None:
        """After the decision's commit: the owner's further warnings armed, the log told; a
        lease with no lead is signalled at once."""
        for lease, record in begun:
            crash_point("after-preempt-warning")  # tests only (allocator/crash_points.py)
            self._arm(lease, record)
            self._notices.ring_owners((lease.owner_uid,))
            log.info("lease %s of %s: %s", lease.id, lease.owner_name, record.explanation)
        for lease, _record in begun:
            entry = self.book.get(lease.id)
            if entry is not None and self.book.signal_due(entry) and lease.id not in self._busy:
                await self._step(lease.id, self._signal(entry))

    def _arm(self, lease: Lease, record: Preemption) -> None:
        entry = self.book.get(lease.id)
        if entry is None:
            return
        deadline = Deadline(
            self.book.left(entry),
            record.deadline_at,
            contract.epoch_of(record),
            f"for {record.for_user}",
        )
        self._notices.preempting(lease, deadline, record.deadline_at - record.decided_at)

    # The contract's steps -----------------------------------------------------------------------

    async def _signal(self, entry: OpenPreemption) -> None:
        """The chosen signal to the lease's processes but its holder (sent, then recorded: a
        crash between sends it again after the restart rather than never)."""
        lease = self._lifecycle.active(entry.record.lease_id)
        if lease is None:
            return
        sent = self._processes.signal(lease, contract.signal_number(entry.record.signal))
        await self._worker.run(self._signalled, lease.id, sent)

    def _signalled(self, lease_id: str, sent: int) -> None:
        entry = self.book.get(lease_id)
        if entry is None or self._lifecycle.active(lease_id) is None:
            return
        record = replace(entry.record, state=PreemptionState.SIGNALLED, signalled_at=self._clock())
        with self._transaction():
            self._ledger.save_preemption(record)
            self._lifecycle.note(
                lease_id, LeaseEvent.PREEMPT_SIGNAL, contract.signal_detail(record, sent)
            )
        self.book.update(record)

    async def _deadline(self, entry: OpenPreemption) -> None:
        """The deadline passed with no acknowledgement: what is left is killed (before the
        end is recorded, so that a crash between leaves nothing running), the lease ends."""
        lease = self._lifecycle.active(entry.record.lease_id)
        if lease is None:
            return
        self._processes.kill(lease)
        ended = await self._worker.run(self._end, lease.id, None, False)
        if ended is not None:
            log.info(
                "lease %s of %s preempted: %s", lease.id, lease.owner_name, contract.killed_detail()
            )
            self._queue.kick()

    def _end(self, lease_id: str, path: str | None, acknowledged: bool) -> Lease | None:
        """In the worker: the preempted lease ends, acknowledged (with its checkpoint) or at
        its deadline, in one transaction with the preemption's new state."""
        entry = self.book.get(lease_id)
        if entry is None or self._lifecycle.active(lease_id) is None:
            return None
        now = self._clock()
        late = self.book.deadline_passed(entry)
        if acknowledged:
            state, detail = (
                PreemptionState.ACKNOWLEDGED,
                contract.acknowledged_detail(path, late=late),
            )
        else:
            state, detail = PreemptionState.KILLED, contract.killed_detail()
        record = replace(entry.record, state=state, ended_at=now)
        if acknowledged:
            record = replace(record, acknowledged_at=now, checkpoint=path, late=late)
        with self._transaction():
            if acknowledged:
                self._record_checkpoint(lease_id, now, path, late=late)
            ended = self._lifecycle.end_preempted(lease_id, detail)
            self._ledger.save_preemption(record)
        self._count(record)
        return ended

    async def _close(self, entry: OpenPreemption, lease: Lease) -> None:
        """A preempted lease ended otherwise (freed, its processes exited, expired, revoked):
        its preemption is closed in the ledger."""
        record = replace(entry.record, state=PreemptionState.ENDED, ended_at=lease.ended_at)
        try:
            await self._worker.run(self._ledger.save_preemption, record)
        except LedgerError as exc:
            log.error("closing the preemption of lease %s: %s", lease.id, exc)
        self._count(record, lease.state.value)

    def _count(self, record: Preemption, outcome: str | None = None) -> None:
        key = (record.trigger.value, outcome or record.state.value)
        self.counts[key] = self.counts.get(key, 0) + 1

    # Acknowledgements ---------------------------------------------------------------------------

    async def checkpoint_done(
        self, caller: Caller, lease_id: str, path: str | None
    ) -> dict[str, Any]:
        """The job of `lease_id` saved a checkpoint (the path only recorded, never opened):
        during a preemption the lease ends now, and what is left of it is killed shortly;
        after it, recorded as late; otherwise the lease's progress (least work lost first)."""
        answer, ended = await self._worker.run(self._acknowledge, caller, lease_id, path)
        if ended is not None:
            self._processes.kill(ended, EXIT_SECONDS_AFTER_ACK)
            log.info("lease %s of %s preempted: %s", ended.id, ended.owner_name, answer["detail"])
            self._queue.kick()
        return answer

    def _acknowledge(
        self, caller: Caller, lease_id: str, path: str | None
    ) -> tuple[dict[str, Any], Lease | None]:
        lease = self._lifecycle.lease(lease_id)  # UnknownLease when it never existed
        if lease.owner_uid != caller.uid:
            raise PermissionDenied(
                f"lease {lease_id} belongs to {lease.owner_name}: only its owner acknowledges "
                "its checkpoints",
                lease=lease_id,
            )
        if lease.preemptible is None:
            raise NotPreemptible(f"lease {lease_id} was not granted preemptible", lease=lease_id)
        now = self._clock()
        answer: dict[str, Any] = {"lease_id": lease_id, "at": now, "path": path}
        if lease.active and self.book.get(lease_id) is not None:
            late = self.book.deadline_passed(self.book.get(lease_id))  # type: ignore[arg-type]
            ended = self._end(lease_id, path, acknowledged=True)
            detail = contract.acknowledged_detail(path, late=late)
            return {**answer, "late": late, "ended": True, "detail": detail}, ended
        if lease.active:
            with self._transaction():
                self._record_checkpoint(lease_id, now, path, late=False, progress=True)
            return {**answer, "late": False, "ended": False, "detail": "progress recorded"}, None
        return self._late(lease, now, path, answer), None

    def _late(
        self, lease: Lease, now: float, path: str | None, answer: dict[str, Any]
    ) -> dict[str, Any]:
        """An acknowledgement after the lease ended: recorded as late, once, where it was
        preempted; else the lease is not active."""
        record = self._ledger.preemption(lease.id)
        if record is None or record.acknowledged_at is not None:
            raise LeaseNotActive(
                f"lease {lease.id} is {lease.state.value}"
                + ("; its checkpoint was acknowledged already" if record else ""),
                lease=lease.id,
                state=lease.state.value,
            )
        late = record.deadline_at <= now
        with self._transaction():
            self._record_checkpoint(lease.id, now, path, late=late)
            self._ledger.save_preemption(
                replace(record, acknowledged_at=now, checkpoint=path, late=late)
            )
        return {
            **answer,
            "late": late,
            "ended": False,
            "detail": contract.checkpoint_detail(path, late=late),
        }

    def _record_checkpoint(
        self, lease_id: str, now: float, path: str | None, *, late: bool, progress: bool = False
    ) -> None:
        self._ledger.record_checkpoint(lease_id, now, path)
        self.book.checkpointed(lease_id, now, path)
        noted = self._progress_noted.get(lease_id)
        mono = self._monotonic()
        if progress and noted is not None and mono - noted < PROGRESS_NOTE_SECONDS:
            return  # a job that acknowledges every step: its history gets a line a minute
        if progress:
            self._progress_noted[lease_id] = mono
        detail = contract.checkpoint_detail(path, late=late)
        self._lifecycle.note(lease_id, LeaseEvent.CHECKPOINT_DONE, detail)

    # Requeue ------------------------------------------------------------------------------------

    def requeue_spec(self, caller: Caller, spec: AllocateSpec) -> AllocateSpec:
        """In the worker: a requeue's place and terms (requeue.py)."""
        return requeue_spec(self._lifecycle, self._ledger, caller, spec)

    # Views and helpers --------------------------------------------------------------------------

    def of(self, lease_id: str) -> dict[str, Any] | None:
        """An active lease's preemption under way and its last checkpoint (views.py)."""
        return lease_extra(self.book, lease_id)

    def marks(self, lease: Lease | None) -> dict[str, Any]:
        """What `status` and the dashboard add to a GPU held by `lease` (views.py)."""
        return gpu_marks(self.book, lease)

    async def detail(self, lease: Lease) -> dict[str, Any]:
        """The same for any lease: from memory while it is active, else from the ledger."""
        if lease.active or lease.preemptible is None:
            return self.of(lease.id) or {}
        record, checkpoints = await self._worker.run(self._recorded, lease.id)
        found: dict[str, Any] = {}
        if record is not None:
            found["preemption"] = record.to_json()
        if lease.id in checkpoints:
            at, path = checkpoints[lease.id]
            found["last_checkpoint"] = {"at": at, "path": path}
        return found

    def _recorded(
        self, lease_id: str
    ) -> tuple[Preemption | None, dict[str, tuple[float, str | None]]]:
        return self._ledger.preemption(lease_id), self._ledger.last_checkpoints([lease_id])

    def _active(self, lease_id: str) -> Lease:
        lease = self._lifecycle.lease(lease_id)
        if not lease.active:
            raise LeaseNotActive(
                f"lease {lease_id} is {lease.state.value}", lease=lease_id, state=lease.state.value
            )
        return lease

    async def _resync(self) -> None:
        """After a failed commit: the open preemptions as the ledger has them."""
        records = await self._worker.run(self._ledger.open_preemptions)
        kept = {r.lease_id for r in records}
        for entry in self.book:
            if entry.record.lease_id not in kept:
                self.book.drop(entry.record.lease_id)
        for record in records:
            if self.book.get(record.lease_id) is None:
                self.book.open(record)

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in [*self._tasks, *([self._planning] if self._planning else [])]:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
