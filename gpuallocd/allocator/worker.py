"""The serial worker: every allocator call runs here, one at a time, in order.

Calls run on the event loop thread itself (no thread hop on the hot path). Calls that
arrive in the same turn of the loop (concurrent requests) run back to back inside one ledger
unit of work and commit together: one fsync for the lot (group commit). Their callers are
answered only after that commit. If the commit fails, every call of the batch fails with a
LedgerError and the allocator reloads its view from the ledger.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from gpuallocd.errors import GpuallocError, LedgerError

__all__ = ["SerialWorker"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
MAX_BATCH = 64


@dataclass
class _Job:
    call: Callable[[], Any]
    future: asyncio.Future[Any]
    ok: bool = True
    value: Any = None

    def settle(self) -> None:
        if self.future.done():
            return  # the caller went away
        if self.ok:
            self.future.set_result(self.value)
        else:
            self.future.set_exception(self.value)


class SerialWorker:
    """Runs allocator calls one at a time, batching the writes of concurrent ones."""

    def __init__(
        self,
        unit_of_work: Callable[[], AbstractContextManager[Any]] = nullcontext,
        on_commit_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self._unit_of_work = unit_of_work
        self._on_commit_failure = on_commit_failure
        self._pending: list[_Job] = []
        self._flush_scheduled = False

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._pending.append(_Job(functools.partial(fn, *args, **kwargs), future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return await future

    def close(self) -> None:
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        while self._pending:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            self._run_batch(batch)
            for job in batch:
                job.settle()

    def _run_batch(self, batch: list[_Job]) -> None:
        if len(batch) == 1:  # alone: its own ledger transaction is enough
            self._run_jobs(batch)
            return
        try:
            with self._unit_of_work():
                self._run_jobs(batch)
        except Exception as exc:
            log.error("ledger commit failed: %s", exc)
            self._on_commit_failure()
            for job in batch:
                job.ok, job.value = False, LedgerError(f"the ledger commit failed: {exc}")

    @staticmethod
    def _run_jobs(batch: list[_Job]) -> None:
        for job in batch:
            if job.future.done():
                continue  # its caller went away before its turn: do nothing for nobody
            try:
                job.value = job.call()
            except Exception as exc:
                job.ok, job.value = False, exc
                if not isinstance(exc, GpuallocError):
                    log.exception("unexpected error in an allocator call")
