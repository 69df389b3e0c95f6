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
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import Hold
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.allocator.queue.order import QueueOrder
from gpuallocd.allocator.queue.tiers import ahead_of_new, tiered
from gpuallocd.allocator.queue.view import WaitInfo, describe_waiters, holds
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.errors import CapacityError, GpuallocError, GpusUnavailable
from gpuallocd.model import Caller, Lease
from gpuallocd.model.durations import typed_duration
from gpuallocd.policies.fair_share import Priority
from gpuallocd.policies.serving import serve_in_order

__all__ = ["WaitQueue", "Waiter"]

log = logging.getLogger(__name__)

Outcome = Lease | GpuallocError
OnGrant = Callable[[Lease], None]


def _ignore(lease: Lease) -> None:
    """The default grant hook: nothing to do."""


@dataclass(eq=False)
class Waiter:
    caller: Caller
    spec: AllocateSpec
    since: float
    future: asyncio.Future[Lease]
    id: str = field(default_factory=lambda: secrets.token_hex(4))
    on_grant: OnGrant = _ignore

    def to_json(self, position: int, info: WaitInfo, now: float) -> dict[str, Any]:
        """As `queue` shows it: `position` from 1, why it waits and when it may start."""
        return {
            "id": self.id,
            "position": position,
            "waited_seconds": max(0.0, now - self.since),
            "reason": info.reason,
            "reason_detail": info.detail,
            "estimated_start_at": info.estimated_start_at,
            "owner": {"uid": self.caller.uid, "user": self.caller.user},
            "pid": self.caller.pid,
            "count": self.spec.count,
            "gpus": list(self.spec.gpus),
            "policy": self.spec.policy,
            "label": self.spec.label,
            "since": self.since,
            "preemptible": self.spec.preemptible,
            "requeue_of": self.spec.requeue_of,
        }


def _reserved(lifecycle: LeaseLifecycle, waiters: Sequence[Waiter]) -> frozenset[str]:
    reserved: set[str] = set()
    for waiter in waiters:
        reserved |= lifecycle.usable_gpus(waiter.spec, waiter.caller.uid)
    return frozenset(reserved)


def _serve_in_order(
    lifecycle: LeaseLifecycle, waiters: Sequence[Waiter]
) -> list[tuple[Waiter, Outcome]]:
    """Runs in the serial worker: grant every waiter that fits without jumping a blocked one
    (`policies/serving.py`); a waiter refused for another reason than capacity gets its error."""

    def grant(waiter: Waiter, held: frozenset[str]) -> Outcome | None:
        try:
            lease = lifecycle.allocate(
                waiter.caller, waiter.spec, reserved=held, waited_since=waiter.since
            )
        except CapacityError:
            return None
        except GpuallocError as exc:
            return exc
        waiter.on_grant(lease)
        return lease

    def pool(waiter: Waiter) -> frozenset[str]:
        return lifecycle.usable_gpus(waiter.spec, waiter.caller.uid)

    return serve_in_order(waiters, grant, pool)


class WaitQueue:
    """The allocation front door: grants at once where fair, else queues the caller."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        worker: SerialWorker,
        clock: Callable[[], float],
        order: QueueOrder | None = None,
        on_served: Callable[[], None] = lambda: None,
    ) -> None:
        """`order`: the order waiters are served in (first come, first served without);
        `on_served`: told each time the queue was served and some still wait (preemption)."""
        self._order = order
        self._on_served = on_served
        self._lifecycle = lifecycle
        self._worker = worker
        self._clock = clock
        self._waiters: list[Waiter] = []
        self._serving: asyncio.Task[None] | None = None
        self._again = False

    def waiters(self) -> list[dict[str, Any]]:
        """The queue in order, with reasons and estimates (run it in the serial worker)."""
        arranged = self._arranged(self._waiters)
        waiters = [waiter for waiter, _ in arranged]
        now = self._clock()
        infos = describe_waiters(
            waiters,
            self._lifecycle.gpu_status(),
            self._lifecycle.usable_gpus,
            now=now,
            ttl_of=self._lifecycle.ttl_of,
            held_until=self._lifecycle.reservations.held_until(
                now, self._lifecycle.ttl_of(AllocateSpec())
            ),
            power_note=self._lifecycle.hardware.budget.note,
        )
        return [
            {**waiter.to_json(position, info, now), "priority": p.to_json() if p else None}
            for position, ((waiter, p), info) in enumerate(zip(arranged, infos, strict=True), 1)
        ]

    def holds(self) -> dict[str, Hold]:
        """The free GPUs held for waiters, by UUID."""
        ordered = [waiter for waiter, _ in self._arranged(self._waiters)]
        return holds(ordered, self._lifecycle.usable_gpus)

    def arranged(self) -> list[Waiter]:
        """The waiters in the order they are served."""
        return [waiter for waiter, _ in self._arranged(self._waiters)]

    def _arranged(self, waiters: Sequence[Waiter]) -> list[tuple[Waiter, Priority | None]]:
        """The waiters in the order they are served, each with its fair-share priority
        (preemptible ones behind the others: tiers.py)."""
        if self._order is None:
            return tiered([(waiter, None) for waiter in waiters], fair=False)
        return tiered(self._order.arrange(waiters), fair=self._order.fair)

    def _serve_arranged(self, waiters: Sequence[Waiter]) -> list[tuple[Waiter, Outcome]]:
        ordered = [waiter for waiter, _ in self._arranged(waiters)]
        return _serve_in_order(self._lifecycle, ordered)

    def waiting(self) -> int:
        """How many requests wait now."""
        return len(self._waiters)

    def waiting_of(self, uid: int) -> int:
        """How many requests of the user `uid` wait now."""
        return sum(w.caller.uid == uid for w in self._waiters)

    def wanted_gpus(self) -> frozenset[str]:
        """Every GPU some waiter could use."""
        return _reserved(self._lifecycle, self._waiters)

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
        ahead = list(self._waiters)
        try:
            return await self._worker.run(self._allocate_now, caller, spec, ahead, on_grant)
        except CapacityError:
            if not wait:
                raise
        await self._worker.run(self._lifecycle.check_servable, caller, spec)
        return await self._wait(caller, spec, timeout, on_grant)

    def _allocate_now(
        self, caller: Caller, spec: AllocateSpec, ahead: Sequence[Waiter], on_grant: OnGrant
    ) -> Lease:
        ahead = ahead_of_new(spec, ahead, self._clock())
        if self._order is not None:
            ahead = self._order.ahead_of(caller, ahead)
        reserved = _reserved(self._lifecycle, ahead)
        lease = self._lifecycle.allocate(caller, spec, reserved=reserved)
        on_grant(lease)
        return lease

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
        )
        # The waiting limit is checked and the waiter queued in one step (no await between):
        # parallel requests of one user cannot all pass the check before any of them queues.
        self._lifecycle.quota.check_waiting(caller, self.waiting_of(caller.uid))
        self._waiters.append(waiter)
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
        for waiter in list(self._waiters):
            waiter.future.cancel()

    def _leave(self, waiter: Waiter) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)
            self.kick()  # its reservation is gone: those behind it may fit now

    def kick(self) -> None:
        """GPUs may have come free: serve the queue (soon, on the event loop)."""
        if not self._waiters:
            return
        if self._serving is not None and not self._serving.done():
            self._again = True
            return
        self._serving = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        self._again = True
        while self._again:
            self._again = False
            pending = [w for w in self._waiters if not w.future.done()]
            if not pending:
                return
            outcomes = await self._worker.run(self._serve_arranged, pending)
            for waiter, outcome in outcomes:
                await self._deliver(waiter, outcome)
        if self._waiters:
            self._on_served()  # those still waiting may make room by preemption

    async def _deliver(self, waiter: Waiter, outcome: Outcome) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        if not waiter.future.done():
            if isinstance(outcome, Lease):
                waiter.future.set_result(outcome)
            else:
                waiter.future.set_exception(outcome)
            return
        if isinstance(outcome, Lease):  # the waiter left while it was being granted
            with contextlib.suppress(GpuallocError):
                await self._worker.run(self._lifecycle.free, waiter.caller, outcome.id)
