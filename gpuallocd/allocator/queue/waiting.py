"""Waiting for GPUs: a first-come, first-served queue that no large request starves in.

A request that may wait and finds no GPUs joins the queue. Whenever GPUs may have come
free (a lease ended, a GPU came back, a waiter left) the queue is served in order: each
waiter that fits is granted; one that does not fit reserves the GPUs it could use, and
nobody behind it may take those. So a small request goes ahead of a blocked one only with
GPUs the blocked one could never use, and never delays it. A new request, waiting or not,
respects every reservation too. There is no polling: only events wake the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import GpuStatus, Hold, NodeView
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.allocator.power.budget import OverBudget
from gpuallocd.allocator.power.hardware import LeaseHardware
from gpuallocd.allocator.queue.index import WaiterIndex
from gpuallocd.allocator.queue.order import QueueOrder
from gpuallocd.allocator.queue.preview import Preview, WouldWait, waited_for
from gpuallocd.allocator.queue.serve import (
    LookedAt,
    Outcome,
    Waiter,
    claimed_units,
    serve_every_waiter,
    serve_free_units,
)
from gpuallocd.allocator.queue.tiers import place, tiered
from gpuallocd.allocator.queue.view import PowerWait, WaitInfo, describe_waiters, holds
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.site.reservation_board import ReservationBoard
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.errors import CallerError, CapacityError, GpuallocError, GpusUnavailable
from gpuallocd.model import Caller, Lease
from gpuallocd.model.durations import typed_duration
from gpuallocd.model.queue_text import held_ahead
from gpuallocd.policies.fair_share import Priority

__all__ = ["WaitQueue", "Waiter"]

log = logging.getLogger(__name__)

OnGrant = Callable[[Lease], None]


def _ignore(_: object) -> None:
    """The default hooks: nothing to do."""


class WaitQueue:
    """The allocation front door: grants at once where fair, else queues the caller."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        worker: SerialWorker,
        clock: Callable[[], float],
        order: QueueOrder | None = None,
        looked_at: LookedAt = _ignore,
        on_served: Callable[[], None] = lambda: None,
        *,
        node: NodeView,
        quota: Quota,
        reservations: ReservationBoard,
        hardware: LeaseHardware,
    ) -> None:
        """`order`: the order waiters are served in (first come, first served without);
        `looked_at`: told of each waiter that a grant, a claim or a serve looks at;
        `on_served`: told each time the queue was served and some still wait (preemption).
        The parts it reads (leases/parts.py): the node's units and layout, the quota's
        waiting limit and rules, the reservations' holds, the power budget's refusals."""
        self._node = node
        self._quota = quota
        self._reservations = reservations
        self._hardware = hardware
        self._order = order
        self._on_served = on_served
        self._preemptible = 0  # preemptible waiters: while any wait, tiers.py orders them
        self._lifecycle = lifecycle
        self._worker = worker
        self._clock = clock
        self._looked_at = looked_at
        self._index: WaiterIndex[Waiter] = WaiterIndex(node.usable_gpus)
        self._layout = self._layout_now()
        self._rules = quota.rules
        self._look_at_all = False  # the next serve looks at every waiter
        self._arrivals = 0  # waiters ever queued: each one's `seq`
        self._serving: asyncio.Task[None] | None = None
        self._again = False

    def waiters(self) -> list[dict[str, Any]]:
        """The queue in order, with reasons and estimates (run it in the serial worker)."""
        arranged = self._arranged(list(self._index))
        waiters = [waiter for waiter, _ in arranged]
        now = self._clock()
        infos = self._described(waiters, self._lifecycle.gpu_status())
        return [
            {**waiter.to_json(position, info, now), "priority": p.to_json() if p else None}
            for position, ((waiter, p), info) in enumerate(zip(arranged, infos, strict=True), 1)
        ]

    def _described(
        self,
        waiters: Sequence[Waiter],
        statuses: Sequence[GpuStatus],
        power_note: str | None = None,
    ) -> list[WaitInfo]:
        """Why each waiter waits and its estimated start, in queue order (view.py);
        `power_note`: why a preview's lease does not fit the power budget."""
        now = self._clock()
        return describe_waiters(
            waiters,
            statuses,
            self._lifecycle.usable_gpus,
            now=now,
            ttl_of=self._lifecycle.ttl_of,
            held_until=self._reservations.held_until(now, self._lifecycle.ttl_of(AllocateSpec())),
            power=self._power_wait(power_note),
        )

    def _power_wait(self, note: str | None = None) -> PowerWait | None:
        """Why the last grant (or a preview's lease: `note`) did not fit the power budget, for
        the reasons and estimates."""
        hardware = self._hardware
        budget = hardware.budget
        note = note or budget.note
        if note is None:
            return None
        return PowerWait(
            note, budget.short_mw, lambda gpus: budget.frees_mw(gpus, hardware.caps.in_force)
        )

    def holds(self) -> dict[str, Hold]:
        """The free GPUs held for waiters, by UUID."""
        self._follow_layout()
        kept = self._lifecycle.kept_from()
        index = self._index

        def usable(waiter: Waiter) -> frozenset[str]:
            return index.units_of(waiter) - kept(waiter.caller.uid, waiter.spec)

        return holds(self._in_order(), usable, wanted=index.units())

    def _in_order(self) -> Iterable[Waiter]:
        """The waiters in the order they are served (under fifo with no preemptible waiter,
        read as they are needed)."""
        if self._preemptible == 0 and (self._order is None or not self._order.fair):
            return iter(self._index)
        return self.arranged()

    def arranged(self) -> list[Waiter]:
        """The waiters in the order they are served."""
        return [waiter for waiter, _ in self._arranged(list(self._index))]

    def _arranged(self, waiters: Sequence[Waiter]) -> list[tuple[Waiter, Priority | None]]:
        """The waiters in the order they are served, each with its fair-share priority
        (preemptible ones behind the others: tiers.py)."""
        if self._order is None:
            return tiered([(waiter, None) for waiter in waiters], fair=False)
        return tiered(self._order.arrange(waiters), fair=self._order.fair)

    def waiting(self) -> int:
        """How many requests wait now."""
        return len(self._index)

    def waiting_of(self, uid: int) -> int:
        """How many requests of the user `uid` wait now."""
        return self._index.waiting_of(uid)

    def wanted_gpus(self) -> frozenset[str]:
        """Every GPU some waiter could use."""
        self._follow_layout()
        kept = self._lifecycle.kept_from()
        return claimed_units(
            self._index, kept, lambda _: True, ahead_first=True, looked_at=self._looked_at
        )

    def _layout_now(self) -> tuple[object, object]:
        """What a waiter's units depend on: the node's topology and its shared GPUs."""
        node = self._node
        return node.topology, node.share_capacity

    def _follow_layout(self) -> None:
        """Index the waiters again if the node's layout changed (a GPU came or went, MIG
        instances were remade); the next serve then looks at every waiter."""
        layout = self._layout_now()
        if any(now is not before for now, before in zip(layout, self._layout, strict=True)):
            self._layout = layout
            self._index.relaid(self._node.usable_gpus)
            self._look_at_all = True

    async def allocate(
        self,
        caller: Caller,
        spec: AllocateSpec,
        *,
        wait: bool,
        timeout: float | None,
        on_grant: OnGrant = _ignore,
    ) -> Lease:
        """A lease now, or after waiting; `on_grant` runs in the same worker call as the grant.

        A request that may wait is checked before it queues: over a limit of the caller
        (`quota_exceeded`), or blocked only by the caller's own leases (`would_wait_forever`),
        it is refused at once.
        """
        arrived = self._arrivals  # the waiters queued before this request came
        try:
            return await self._worker.run(self._allocate_now, caller, spec, arrived, on_grant)
        except CapacityError:
            if not wait:
                raise
        await self._worker.run(self._lifecycle.check_servable, caller, spec)
        return await self._wait(caller, spec, timeout, on_grant)

    def _allocate_now(
        self, caller: Caller, spec: AllocateSpec, arrived: int, on_grant: OnGrant
    ) -> Lease:
        """Grant without the units that the waiters ahead of the request may use: those
        queued before it came, and under fair share of a priority at least its own; a
        request that may not be preempted lets no preemptible waiter go first, a preemptible
        one only those whose place is before its own (tiers.py)."""
        reserved = self._claimed_for(caller, spec, arrived)
        try:
            lease = self._lifecycle.allocate(caller, spec, reserved=reserved)
        except GpusUnavailable as exc:
            if not reserved or "available" not in exc.details:  # nothing held, or not the policy's
                raise
            held = self._free_held(reserved)
            if not held:
                raise
            said = f"{exc.message}; {held_ahead(held)}"
            raise GpusUnavailable(said, **exc.details) from None
        on_grant(lease)
        return lease

    def _free_held(self, reserved: frozenset[str]) -> int:
        """How many of the free GPUs `status` shows as held for a waiter are in `reserved`
        (what a refused request is told)."""
        statuses = self._lifecycle.gpu_status(self.holds())
        return sum(1 for s in statuses if s.state == "reserved" and s.gpu.uuid in reserved)

    def _claimed_for(self, caller: Caller, spec: AllocateSpec, arrived: int) -> frozenset[str]:
        """The units a new request of `caller` for `spec` leaves to the waiters ahead of it
        (`arrived`: the waiters queued before it came)."""
        self._follow_layout()
        order = self._order
        priority = order.priorities() if order is not None else None
        tier = self._tier_ahead(spec)
        ahead: Callable[[Waiter], bool] = lambda w: w.seq <= arrived and tier(w)  # noqa: E731
        ahead_first = self._preemptible == 0  # a line is in order of arrival
        if order is not None and priority is not None:
            own = order.own_priority(caller)
            ahead = lambda w: w.seq <= arrived and tier(w) and priority(w) >= own  # noqa: E731
            ahead_first = ahead_first and self._index.in_order  # and of priority too
        kept = self._lifecycle.kept_from()
        return claimed_units(
            self._index, kept, ahead, ahead_first=ahead_first, looked_at=self._looked_at
        )

    def preview(self, caller: Caller, spec: AllocateSpec, wait: bool) -> Preview:
        """What `allocate` would do now, writing nothing (run it in the serial worker): the
        same claim for the waiters ahead and the grant's own checks; where it does not fit,
        the checks a wait meets and the waiter it would be (preview.py)."""
        policy = self._lifecycle.policy_of(spec)
        reserved = self._claimed_for(caller, spec, self._arrivals)
        power_note = None
        try:
            lease = self._lifecycle.preview(caller, spec, reserved=reserved)
        except OverBudget as over:
            refusal: GpuallocError | None = over.refusal
            power_note = over.note
        except CapacityError as exc:
            refusal = exc
        except CallerError as exc:
            return Preview(policy, wait, refusal=exc)
        else:
            hardware = self._hardware
            caps = hardware.caps.planned(lease, hardware.budget.readings)
            retry = lease.id if self._lifecycle.is_active(lease.id) else None
            return Preview(policy, wait, lease=lease, caps=caps, retry_of=retry)
        if wait:
            try:
                self._lifecycle.check_servable(caller, spec)
                self._quota.check_waiting(caller, self.waiting_of(caller.uid))
            except CallerError as exc:
                return Preview(policy, wait, refusal=exc)
            refusal = None
        would_wait = self._would_wait(caller, spec, power_note)
        return Preview(policy, wait, refusal=refusal, would_wait=would_wait)

    def _would_wait(self, caller: Caller, spec: AllocateSpec, power_note: str | None) -> WouldWait:
        """The waiter the request would be, placed and estimated as `queue` shows waiters."""
        future: asyncio.Future[Lease] = asyncio.get_running_loop().create_future()
        seq = self._arrivals + 1
        ghost = Waiter(caller=caller, spec=spec, since=self._clock(), future=future, seq=seq)
        future.cancel()  # never queued, never answered
        waiters = [waiter for waiter, _ in self._arranged([*self._index, ghost])]
        position = waiters.index(ghost) + 1
        statuses = self._lifecycle.unexpired_statuses()
        info = self._described(waiters, statuses, power_note)[position - 1]
        pool = self._node.usable_gpus(spec)
        return WouldWait(position, info, waited_for(statuses, pool, info.estimated_start_at))

    def _tier_ahead(self, spec: AllocateSpec) -> Callable[[Waiter], bool]:
        """Which waiters' tier goes before a new request of `spec` (tiers.py)."""
        if not spec.preemptible:
            return lambda w: not w.spec.preemptible
        own = self._clock() if spec.queued_since is None else spec.queued_since
        return lambda w: not w.spec.preemptible or place(w) <= own

    async def _wait(
        self, caller: Caller, spec: AllocateSpec, timeout: float | None, on_grant: OnGrant
    ) -> Lease:
        loop = asyncio.get_running_loop()
        waiter = Waiter(
            caller=caller,
            spec=spec,
            since=self._clock(),
            future=loop.create_future(),
            on_grant=on_grant,
            seq=self._arrivals + 1,
        )
        # The waiting limit is checked and the waiter queued in one step (no await between):
        # parallel requests of one user cannot all pass the check before any of them queues.
        self._quota.check_waiting(caller, self.waiting_of(caller.uid))
        self._follow_layout()
        self._arrivals = waiter.seq
        self._index.add(waiter)
        self._preemptible += spec.preemptible
        log.info("%s (pid %d) waits for GPUs", caller.user, caller.pid)
        self._on_served()  # it may make room by preemption
        if self._order is not None and self._order.fair:
            self.kick()  # it may go ahead of waiters that hold free GPUs it can use
        try:
            return await asyncio.wait_for(waiter.future, timeout)
        except asyncio.TimeoutError:
            raise GpusUnavailable(
                f"no GPUs came free within {typed_duration(timeout or 0)} of waiting (--timeout)",
                waited_seconds=timeout,
            ) from None
        finally:
            self._leave(waiter)

    def release_all(self) -> None:
        """The daemon stops: every waiting request ends now, unanswered (its connection
        closes), instead of holding the stop for the grace period. Its client sends it again,
        with the same request id, to the daemon that comes next (docs/client.md)."""
        for waiter in list(self._index):
            waiter.future.cancel()

    def _remove(self, waiter: Waiter) -> bool:
        """Take `waiter` out of the queue; whether it was in it."""
        removed = self._index.remove(waiter)
        self._preemptible -= removed and waiter.spec.preemptible
        return removed

    def _leave(self, waiter: Waiter) -> None:
        if self._remove(waiter):
            self.kick()  # its reservation is gone: those behind it may fit now

    def kick(self) -> None:
        """GPUs may have come free: serve the queue (soon, on the event loop)."""
        if not self._index:
            return
        if self._serving is not None and not self._serving.done():
            self._again = True
            return
        self._serving = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        self._again = True
        while self._again:
            self._again = False
            if not any(not w.future.done() for w in self._index):
                return
            outcomes = await self._worker.run(self._serve_now)
            for waiter, outcome in outcomes:
                await self._deliver(waiter, outcome)
        if self._index:
            self._on_served()  # those still waiting may make room by preemption

    def _serve_now(self) -> list[tuple[Waiter, Outcome]]:
        """Runs in the serial worker: grant every waiter that fits without jumping a blocked
        one (`policies/serving.py`), looking at the waiters of the free units. After the
        node's layout or the site's rules changed, at every waiter: either may end a waiter
        with an error whatever is free; so may a fair queue whose clock went back (its lines
        are then out of its order), and a queue with preemptible waiters (served in tiers,
        which the lines do not keep)."""
        self._lifecycle.expire_due()
        self._follow_layout()
        rules, self._rules = self._rules, self._quota.rules
        every, self._look_at_all = self._look_at_all or rules is not self._rules, False
        priority = self._order.priorities() if self._order is not None else None
        in_order = priority is None or self._index.in_order
        if every or not in_order or self._preemptible:
            pending = [w for w in self._index if not w.future.done()]
            ordered = [waiter for waiter, _ in self._arranged(pending)]
            return serve_every_waiter(self._lifecycle, ordered, self._looked_at)
        key: Callable[[Waiter], Any] = (
            (lambda w: w.seq) if priority is None else (lambda w: (-priority(w), w.seq))
        )
        return serve_free_units(self._lifecycle, self._index, key, self._looked_at)

    async def _deliver(self, waiter: Waiter, outcome: Outcome) -> None:
        self._remove(waiter)
        if not waiter.future.done():
            if isinstance(outcome, Lease):
                waiter.future.set_result(outcome)
            else:
                waiter.future.set_exception(outcome)
            return
        if isinstance(outcome, Lease):  # the waiter left while it was being granted
            with contextlib.suppress(GpuallocError):
                await self._worker.run(self._lifecycle.free, waiter.caller, outcome.id)
