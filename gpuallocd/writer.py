"""The single writer thread: every call on the allocator runs here, one at a time.

Calls that queue up while the thread is busy run back to back inside one ledger unit of
work and commit together: one fsync for the lot (group commit). Their callers are answered
only after that commit. If the commit fails, every call of the batch fails with a
LedgerError and the allocator reloads its view from the ledger.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import threading
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
    loop: asyncio.AbstractEventLoop
    ok: bool = True
    value: Any = None


def _settle(job: _Job) -> None:
    if job.future.done():
        return
    if job.ok:
        job.future.set_result(job.value)
    else:
        job.future.set_exception(job.value)


class SerialWorker:
    """Runs blocking calls on one dedicated thread, in the order they were submitted."""

    def __init__(
        self,
        unit_of_work: Callable[[], AbstractContextManager[Any]] = nullcontext,
        on_commit_failure: Callable[[], None] = lambda: None,
        name: str = "gpuallocd-writer",
    ) -> None:
        self._unit_of_work = unit_of_work
        self._on_commit_failure = on_commit_failure
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(functools.partial(fn, *args, **kwargs), future, loop))
        return await future

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join()

    def _next_batch(self) -> tuple[list[_Job], bool]:
        first = self._jobs.get()
        if first is None:
            return [], True
        batch = [first]
        while len(batch) < MAX_BATCH:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return batch, True
            batch.append(job)
        return batch, False

    def _serve(self) -> None:
        stopping = False
        while not stopping:
            batch, stopping = self._next_batch()
            if batch:
                self._run_batch(batch)

    def _run_batch(self, batch: list[_Job]) -> None:
        try:
            with self._unit_of_work():
                for job in batch:
                    try:
                        job.value = job.call()
                    except BaseException as exc:
                        job.ok, job.value = False, exc
                        if not isinstance(exc, GpuallocError):
                            log.exception("unexpected error on the writer thread")
        except Exception as exc:
            log.error("ledger commit failed: %s", exc)
            self._on_commit_failure()
            for job in batch:
                job.ok, job.value = False, LedgerError(f"the ledger commit failed: {exc}")
        for job in batch:
            job.loop.call_soon_threadsafe(_settle, job)
