"""The serial worker: every allocator call runs here, one at a time, in order.

Calls run on the event loop thread itself (no thread hop on the hot path). A call alone
commits its own ledger transaction, inline. Calls that arrive together (concurrent requests)
run back to back inside one ledger unit of work and commit together: one fsync for the lot
(group commit). That commit runs on the worker's commit thread, so the event loop reads and
answers other connections while the disk syncs; no call runs until it is done, so the
ledger is never touched by two threads at once. Callers are answered only after their
commit. If it fails, every call of the batch fails with a LedgerError and the allocator
reloads its view from the ledger.

`after_commit` is told after each commit, once the commit's callers are settled and before
another call runs, so what it takes to publish is exactly what that commit made durable.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
        after_commit: Callable[[], None] = lambda: None,
    ) -> None:
        self._unit_of_work = unit_of_work
        self._on_commit_failure = on_commit_failure
        self._after_commit = after_commit
        self._pending: list[_Job] = []
        self._flush_scheduled = False
        self._committing: asyncio.Future[Any] | None = None
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ledger-commit")

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._pending.append(_Job(functools.partial(fn, *args, **kwargs), future))
        if not self._flush_scheduled and self._committing is None:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return await future

    async def close(self) -> None:
        """Finish the commit in flight and every call queued, then stop the commit thread."""
        while self._committing is not None or self._pending:
            if self._committing is not None:
                await asyncio.wait([self._committing])
            else:
                self._flush()
        self._committer.shutdown(wait=True)

    def _flush(self) -> None:
        self._flush_scheduled = False
        while self._pending and self._committing is None:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            if len(batch) == 1:  # alone: its own ledger transaction, committed inline
                self._run_jobs(batch)
                self._settle(batch)
            else:
                self._run_batch(batch)

    def _run_batch(self, batch: list[_Job]) -> None:
        """Run the batch in one unit of work and start its commit on the commit thread."""
        unit = self._unit_of_work()
        try:
            unit.__enter__()
        except Exception as exc:
            self._fail(batch, exc)
            return
        self._run_jobs(batch)
        loop = asyncio.get_running_loop()
        committing = loop.run_in_executor(self._committer, unit.__exit__, None, None, None)
        self._committing = committing
        committing.add_done_callback(lambda done: self._committed(batch, done))

    def _committed(self, batch: list[_Job], done: asyncio.Future[Any]) -> None:
        self._committing = None
        exc = None if done.cancelled() else done.exception()
        try:
            if done.cancelled() or exc is not None:
                self._fail(batch, exc or LedgerError("the commit was cancelled"))
            else:
                self._settle(batch)
        finally:
            self._flush()  # what arrived during the commit

    def _settle(self, batch: list[_Job]) -> None:
        for job in batch:
            job.settle()
        try:
            self._after_commit()
        except Exception:  # what was committed stays committed; the worker goes on
            log.exception("publishing a commit's transitions failed")

    def _fail(self, batch: list[_Job], exc: BaseException) -> None:
        log.error("ledger commit failed: %s", exc)
        self._on_commit_failure()
        for job in batch:
            job.ok, job.value = False, LedgerError(f"the ledger commit failed: {exc}")
            job.settle()

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
