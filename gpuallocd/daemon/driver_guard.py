"""The GPU driver as a fault: blocking inventory calls (a sample, a rescan) run off the event
loop, one at a time, each with a deadline.

A driver call can hang rather than fail (a GPU in trouble, the kernel driver's lock held).
The guard runs each call on a thread of its own, never on the loop and never in the loop's
shared pool, and lets only one call run at a time: while one hangs, later samples are skipped
(no thread piles up behind it) and a rescan is refused with the hung call's name (a rescan
that meets a sample merely running waits for it). The API
keeps answering from the ledger and the last sample. When the call returns at last, its
answer is dropped (it is stale), the driver is in service again and the next sample runs.

`report()` is what `/v1/health`, `/v1/diagnostics` and `gpuallocctl doctor` show: the
vendor-library calls overdue (named by the gate's CallWatch, with how long they have run),
and the guarded task waiting on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from gpuallocd.errors import InventoryError
from gpuallocd.inventory import DriverCalls, Inventory
from gpuallocd.inventory.calls import CallWatch, InFlight

__all__ = ["DriverGuard", "close_within"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def _deliver(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class DriverGuard:
    """One blocking inventory call at a time, off the loop, with `deadline_seconds`.

    `calls` is the gate's record of library calls in flight (None where the backend has no
    gate, such as a topology file: then only the guarded task itself is watched).
    """

    def __init__(self, calls: CallWatch | None, *, deadline_seconds: float) -> None:
        self._gate_calls = calls
        self._tasks = CallWatch() if calls is None else CallWatch(calls.monotonic)
        self._deadline = deadline_seconds
        self._busy: asyncio.Future[Any] | None = None
        self._late = False

    @classmethod
    def of(cls, inventory: Inventory, *, deadline_seconds: float) -> DriverGuard:
        """The guard of an inventory, watching its gate's calls where it has one."""
        calls = inventory.driver_calls() if isinstance(inventory, DriverCalls) else None
        return cls(calls, deadline_seconds=deadline_seconds)

    @property
    def busy(self) -> bool:
        """A call runs now (perhaps hung)."""
        return self._busy is not None and not self._busy.done()

    async def run(self, task: str, call: Callable[[], T]) -> T | None:
        """`call()`'s answer; None when an earlier call still runs (this one is skipped) or
        this one passed the deadline (it runs on in its thread; its answer is dropped)."""
        if self.busy:
            return None
        future = self._start(task, call)
        # asyncio.wait, not wait_for: it never cancels the call's future, and on Python 3.11
        # wait_for can swallow a cancellation that comes as the call returns (a stop hangs).
        done, _ = await asyncio.wait({future}, timeout=self._deadline)
        if not done:
            self._overdue(task, future)
            return None
        return future.result()

    async def answer(self, task: str, call: Callable[[], T]) -> T:
        """`call()`'s answer, or InventoryError naming the hung call where there is none.
        A call that is running but not overdue (a sample) is waited for first, within the
        deadline: only a hung driver refuses, never the timing of a routine sample."""
        await self._settle()
        found = await self.run(task, call)
        if found is None:
            raise InventoryError(
                f"the GPU driver is not answering ({self.describe()}); {task} cannot run until "
                "it does (`gpuallocctl doctor` shows the call and how long it has hung)"
            )
        return found

    async def _settle(self) -> None:
        running = self._busy
        if running is not None and not running.done() and not self.hung:
            await asyncio.wait({running}, timeout=self._deadline)

    def _start(self, task: str, call: Callable[[], T]) -> asyncio.Future[T]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._busy = future

        def work() -> None:
            with self._tasks.track(task):
                try:
                    outcome: tuple[bool, Any] = (True, call())
                except BaseException as exc:  # handed to the awaiting side, as the pool does
                    outcome = (False, exc)
            with contextlib.suppress(RuntimeError):  # the loop closed while the call hung
                loop.call_soon_threadsafe(_deliver, future, outcome)

        # A daemon thread, not a pool's: a call hung for good must not hold up the exit.
        threading.Thread(target=work, name=f"gpuallocd-driver-{task}", daemon=True).start()
        return future

    def _overdue(self, task: str, future: asyncio.Future[Any]) -> None:
        self._late = True
        log.error(
            "the GPU driver has not answered for %.1f s (%s); %s is paused, the API answers "
            "from the ledger and the last sample",
            self._deadline,
            self.describe(),
            task,
        )
        future.add_done_callback(lambda done: self._answered(task, done))

    def _answered(self, task: str, future: asyncio.Future[Any]) -> None:
        self._late = False
        if not future.cancelled() and future.exception() is not None:
            log.warning("the late %s failed: %s", task, future.exception())
        log.warning("the GPU driver answered again; %s resumes", task)

    @property
    def hung(self) -> bool:
        """A driver call runs past its deadline now: calls made on the event loop (a grant's
        energy reading) are skipped meanwhile, not made to hang with it."""
        return bool(self._hung())

    def _hung(self) -> list[InFlight]:
        calls = self._gate_calls.overdue(self._deadline) if self._gate_calls else []
        return calls or self._tasks.overdue(self._deadline)

    def describe(self) -> str:
        """The overdue calls in words, e.g. `nvmlDeviceGetMemoryInfo running for 12.0 s`."""
        now = self._tasks.monotonic()
        hung = self._hung()
        if not hung:
            return "no call overdue"
        return ", ".join(f"{e.call} running for {e.seconds(now):.1f} s" for e in hung)

    def report(self) -> dict[str, Any]:
        """The driver's state for health and diagnostics (docs/driver-faults.md)."""
        now = self._tasks.monotonic()
        hung = self._hung()
        waiting = self._tasks.overdue(self._deadline)
        return {
            "state": "hung" if hung else "ok",
            "deadline_seconds": self._deadline,
            "hung_calls": [entry.to_json(now) for entry in hung],
            "paused": [entry.call for entry in waiting],
        }


def close_within(close: Callable[[], None], seconds: float) -> bool:
    """Run `close` (an inventory's) on a thread of its own for at most `seconds`; False when
    it did not return in time (a hung driver must not hold up the daemon's exit)."""
    thread = threading.Thread(target=close, name="gpuallocd-driver-close", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        log.error("closing the GPU backend did not finish within %.1f s; leaving it", seconds)
        return False
    return True
