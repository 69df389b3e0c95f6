"""Work owed after leases end, done until it is (docs/driver-faults.md): the one mechanism
for owed work.

Each pending row of the ledger (ledger/cleanup_records.py) goes to the handler of its kind:
a device ACL entry to take away, a power limit to put back (through the driver guard, off
the event loop). A handler is idempotent (doing it twice does no harm), may be a coroutine,
and raises when it could not finish; the row is then tried again later, one second after
its first failure and twice as long after each next one, up to a minute apart, for as long
as it takes, across restarts. A kind with no handler in this version waits the longest and
is shown, never dropped.

The runner sleeps until work is due: woken by the change that owes it (`wake`, with when it
is due), or at the next try of work that failed; with nothing owed it sleeps until woken,
never polling. When the GPU driver answers again after a hang, what failed meanwhile is
tried at once (`retry_now`). A round reads the due rows, does them, and writes what was done
and what failed in one transaction; its ledger reads and writes go through the allocator's
serial worker like every other (`CleanupDesk`, a base of the façade), the handlers run
between them, never on the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.errors import GpuallocError
from gpuallocd.ledger import Ledger
from gpuallocd.model.cleanup import Cleanup, PendingCleanup

__all__ = ["CleanupDesk", "CleanupHandler", "CleanupRunner", "retry_delay"]

log = logging.getLogger(__name__)

T = TypeVar("T")
CleanupHandler = Callable[[Cleanup], "Awaitable[None] | None"]
Serially = Callable[..., Awaitable[Any]]  # the serial worker's `run`
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0


def retry_delay(failures: int) -> float:
    """Seconds until the next try after `failures` failed ones (1 or more)."""
    return min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2.0 ** max(0, failures - 1))


async def _direct(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)


class CleanupRunner:
    """Does the due cleanups of the ledger with `handlers` (by kind), when they are due."""

    def __init__(
        self,
        ledger: Ledger,
        handlers: Mapping[str, CleanupHandler],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ledger = ledger
        self._handlers = dict(handlers)
        self._clock = clock
        self._due_at: float | None = 0.0  # the next round (None: when woken); first at once
        self._woken = asyncio.Event()
        self._retry_all = False
        self.rounds = 0  # rounds run so far (each reads the ledger once)

    @property
    def due_at(self) -> float | None:
        """When the next round runs (None: only when woken)."""
        return self._due_at

    def add_handler(self, kind: str, handler: CleanupHandler) -> None:
        self._handlers[kind] = handler

    def wake(self, due: float = 0.0) -> None:
        """Work is owed from `due` on (0: now): the next round runs then at the latest."""
        if self._due_at is None or due <= self._due_at:
            self._due_at = due
            self._woken.set()

    def retry_now(self) -> None:
        """Try everything owed at once, failed or not (the GPU driver answers again)."""
        self._retry_all = True
        self.wake()

    async def run_due(self, serially: Serially = _direct) -> int:
        """One round: try every cleanup that is due; how many were done."""
        self.rounds += 1
        now = self._clock()
        everything, self._retry_all = self._retry_all, False
        due: list[PendingCleanup] = await serially(
            self._ledger.pending_cleanups, None if everything else now
        )
        done: list[PendingCleanup] = []
        failed: list[tuple[PendingCleanup, str]] = []
        for pending in due:
            error = await self._attempt(pending.cleanup)
            if error is None:
                done.append(pending)
            else:
                failed.append((pending, error))
        await serially(self._settle, done, failed, now)
        return len(done)

    async def run_forever(self, serially: Serially = _direct) -> None:
        """Rounds as work comes due, until cancelled."""
        while True:
            try:
                await self.run_due(serially)
            except GpuallocError as exc:
                log.error("doing the pending cleanups failed: %s", exc.message)
                self._due_at = self._clock() + RETRY_FIRST_SECONDS
            await self._sleep()

    async def _sleep(self) -> None:
        while True:
            self._woken.clear()
            due, now = self._due_at, self._clock()
            if due is not None and due <= now:
                return
            wait = None if due is None else due - now
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._woken.wait(), wait)

    async def _attempt(self, cleanup: Cleanup) -> str | None:
        """None when done; else why not."""
        handler = self._handlers.get(cleanup.kind)
        try:
            if handler is None:
                raise LookupError(f"this version has no handler for {cleanup.kind!r} cleanups")
            outcome = handler(cleanup)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception as exc:  # a handler's failure must never stop the others
            message = exc.message if isinstance(exc, GpuallocError) else str(exc)
            return message or type(exc).__name__
        return None

    def _settle(
        self,
        done: Sequence[PendingCleanup],
        failed: Sequence[tuple[PendingCleanup, str]],
        now: float,
    ) -> None:
        """Write the round's outcome (one transaction); the next round is due at the first
        next try left."""
        retried = [(p.id, now + self._delay(p), error) for p, error in failed]
        self._ledger.cleanups_settled([p.id for p in done], retried)
        for pending in done:
            if pending.attempts:
                cleanup = pending.cleanup
                log.warning(
                    "cleanup done after %d failed attempt(s): %s %s (lease %s)",
                    pending.attempts,
                    cleanup.kind,
                    cleanup.target,
                    cleanup.lease_id,
                )
        for (pending, error), (_, next_try, _) in zip(failed, retried, strict=True):
            self._failed(pending, next_try - now, error)
        self._due_at = self._ledger.first_cleanup_due()

    def _delay(self, pending: PendingCleanup) -> float:
        if pending.cleanup.kind not in self._handlers:
            return RETRY_MAX_SECONDS
        return retry_delay(pending.attempts + 1)

    @staticmethod
    def _failed(pending: PendingCleanup, delay: float, error: str) -> None:
        failures = pending.attempts + 1
        level = logging.ERROR if failures == 1 else logging.DEBUG
        log.log(
            level,
            "cleanup failed (attempt %d, next in %.0f s): %s %s (lease %s): %s",
            failures,
            delay,
            pending.cleanup.kind,
            pending.cleanup.target,
            pending.cleanup.lease_id,
            error,
        )

    def report(self) -> list[dict[str, Any]]:
        """The cleanups not done yet, for diagnostics and `doctor`."""
        return [pending.to_json() for pending in self._ledger.pending_cleanups()]


class CleanupDesk:
    """The façade's door to the cleanups: `cleanups` is the runner (None: nothing owed is
    ever done, as in tests of the allocator alone); its ledger work runs on the serial
    worker."""

    _worker: SerialWorker
    cleanups: CleanupRunner | None = None

    async def owed_work(self) -> None:
        """Do owed work as it comes due, until cancelled (the daemon's housekeeping)."""
        if self.cleanups is not None:
            await self.cleanups.run_forever(self._worker.run)

    async def run_cleanups(self, *, everything: bool = False) -> int:
        """One round now, in turn with the other ledger writes; with `everything`, what is
        owed is tried whether it is due or not (a stopping daemon puts limits back before it
        goes); how many were done."""
        if self.cleanups is None:
            return 0
        if everything:
            self.cleanups.retry_now()
        return await self.cleanups.run_due(self._worker.run)

    async def pending_cleanups(self) -> list[dict[str, Any]]:
        """The cleanups not done yet (diagnostics, `doctor`)."""
        if self.cleanups is None:
            return []
        return await self._worker.run(self.cleanups.report)
