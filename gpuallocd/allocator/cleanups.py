"""Cleanups owed after leases end, done until they are (docs/driver-faults.md).

Each pending row of the ledger (ledger/cleanup_records.py) goes to the handler of its kind:
a device ACL entry to take away, a systemd scope to stop, a power limit to restore. A
handler is idempotent (doing it twice does no harm) and raises when it could not finish;
the row is then tried again later, one second after its first failure and twice as long
after each next one, up to a minute apart, for as long as it takes, across restarts. A
kind with no handler in this version waits the longest and is shown, never dropped.

The runner reads and writes the ledger, so it runs on the allocator's serial worker like
every other ledger write (`CleanupDesk`, a base of the façade): never beside a group commit
in flight on the commit thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.ledger import Ledger
from gpuallocd.model.cleanup import Cleanup, PendingCleanup

__all__ = ["CleanupDesk", "CleanupHandler", "CleanupRunner", "retry_delay"]

log = logging.getLogger(__name__)

CleanupHandler = Callable[[Cleanup], None]
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0


def retry_delay(failures: int) -> float:
    """Seconds until the next try after `failures` failed ones (1 or more)."""
    return min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2.0 ** max(0, failures - 1))


class CleanupRunner:
    """Does the due cleanups of the ledger with `handlers` (by kind); on the event loop, as
    the ledger's one writer."""

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

    def run_due(self) -> int:
        """Try every cleanup that is due; how many were done."""
        now = self._clock()
        return sum(self._try(pending, now) for pending in self._ledger.pending_cleanups(now))

    def _try(self, pending: PendingCleanup, now: float) -> bool:
        cleanup = pending.cleanup
        handler = self._handlers.get(cleanup.kind)
        try:
            if handler is None:
                raise LookupError(f"this version has no handler for {cleanup.kind!r} cleanups")
            handler(cleanup)
        except Exception as exc:  # a handler's failure must never stop the others
            self._failed(pending, now, exc)
            return False
        self._ledger.cleanup_done(pending.id)
        if pending.attempts:
            log.warning(
                "cleanup done after %d failed attempt(s): %s %s (lease %s)",
                pending.attempts,
                cleanup.kind,
                cleanup.target,
                cleanup.lease_id,
            )
        return True

    def _failed(self, pending: PendingCleanup, now: float, exc: Exception) -> None:
        failures = pending.attempts + 1
        delay = retry_delay(failures)
        if pending.cleanup.kind not in self._handlers:
            delay = RETRY_MAX_SECONDS
        self._ledger.cleanup_failed(pending.id, now + delay, str(exc) or type(exc).__name__)
        level = logging.ERROR if failures == 1 else logging.DEBUG
        log.log(
            level,
            "cleanup failed (attempt %d, next in %.0f s): %s %s (lease %s): %s",
            failures,
            delay,
            pending.cleanup.kind,
            pending.cleanup.target,
            pending.cleanup.lease_id,
            exc,
        )

    def report(self) -> list[dict[str, Any]]:
        """The cleanups not done yet, for diagnostics and `doctor`."""
        return [pending.to_json() for pending in self._ledger.pending_cleanups()]


class CleanupDesk:
    """The façade's door to the cleanups: `cleanups` is the runner (None: nothing owed is
    ever done, as in tests of the allocator alone); each call runs on the serial worker."""

    _worker: SerialWorker
    cleanups: CleanupRunner | None = None

    async def run_cleanups(self) -> int:
        """Try every cleanup that is due, in turn with the other ledger writes; how many
        were done."""
        if self.cleanups is None:
            return 0
        return await self._worker.run(self.cleanups.run_due)

    async def pending_cleanups(self) -> list[dict[str, Any]]:
        """The cleanups not done yet (diagnostics, `doctor`)."""
        if self.cleanups is None:
            return []
        return await self._worker.run(self.cleanups.report)
