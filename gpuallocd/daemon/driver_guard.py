"""The GPU driver as a fault: every blocking driver call (a sample, a rescan, a power reading,
a power limit set or put back) runs off the event loop, one at a time, each with a deadline.

A driver call can hang rather than fail (a GPU in trouble, the kernel driver's lock held).
The guard runs the calls in order on a thread of its own, never on the loop and never in the
loop's shared pool; the thread ends a second after its last call and a new one starts with
the next. One call runs at a time (the driver serialises its calls behind one lock), the
others wait their turn in order, so one caller's calls (a user granting capped leases in a
loop) delay a sample by at most the calls queued before it. While a call hangs past its
deadline, every other is refused at once: a sample is skipped (`run`), a rescan or a power
call gets InventoryError naming the hung call (`call`); no thread piles up behind it. A call
past its deadline runs on in its thread, its answer dropped; one still waiting behind a
call that hangs is dropped before it starts. The API keeps answering from the
ledger and the last sample. When the hung call returns at last, the driver is in service
again, and those who asked (`when_answering`) are told.

`GuardedPower` is the inventory's power calls (reading, setting a limit) through the guard,
as the power caps and the power budget use them.

`report()` is what `/v1/health`, `/v1/diagnostics` and `gpuallocctl doctor` show: the
vendor-library calls overdue (named by the gate's CallWatch, with how long they have run),
and the guarded task waiting on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from gpuallocd.errors import InventoryError, NvmlError
from gpuallocd.inventory import DriverCalls, Inventory
from gpuallocd.inventory.base import PowerMetering
from gpuallocd.inventory.calls import CallWatch, InFlight
from gpuallocd.model import PowerReading

__all__ = ["DriverGuard", "GuardedPower", "close_within"]

log = logging.getLogger(__name__)

T = TypeVar("T")
LINGER_SECONDS = 1.0  # the driver thread ends this long after its last call


@dataclass(eq=False)
class _Work(Generic[T]):
    """One call handed to the driver thread, and the future its answer goes to."""

    task: str
    call: Callable[[], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop
    dropped: bool = False  # given up on before it started: the thread skips it
    started: threading.Event = field(default_factory=threading.Event)


def _deliver(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class _DriverThread:
    """Runs calls in the order given on one thread of its own, started by the first call
    and ended after LINGER_SECONDS without one (a daemon thread: a call hung for good never
    holds up the exit)."""

    def __init__(self, tasks: CallWatch) -> None:
        self._tasks = tasks
        self._queue: queue.SimpleQueue[_Work[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._alive = False

    def submit(self, work: _Work[Any]) -> None:
        with self._lock:
            self._queue.put(work)
            if not self._alive:
                self._alive = True
                name = f"gpuallocd-driver-{work.task}"
                threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                work = self._queue.get(timeout=LINGER_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._alive = False
                        return
                continue
            self._run(work)

    def _run(self, work: _Work[Any]) -> None:
        outcome: tuple[bool, Any] = (False, InventoryError(f"{work.task} was given up"))
        if not work.dropped:
            threading.current_thread().name = f"gpuallocd-driver-{work.task}"
            work.started.set()
            with self._tasks.track(work.task):
                try:
                    outcome = (True, work.call())
                except BaseException as exc:  # handed to the awaiting side, as a pool does
                    outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed while the call hung
            work.loop.call_soon_threadsafe(_deliver, work.future, outcome)


class DriverGuard:
    """Blocking driver calls one at a time, off the loop, each with `deadline_seconds`.

    `calls` is the gate's record of library calls in flight (None where the backend has no
    gate, such as a topology file: then only the guarded task itself is watched).
    """

    def __init__(self, calls: CallWatch | None, *, deadline_seconds: float) -> None:
        self._gate_calls = calls
        self._tasks = CallWatch() if calls is None else CallWatch(calls.monotonic)
        self._deadline = deadline_seconds
        self._thread = _DriverThread(self._tasks)
        self._waiting = 0  # calls handed to the thread whose answer has not come back
        self._late: list[_Work[Any]] = []  # calls past their deadline, still running
        self._answering: list[Callable[[], None]] = []

    @classmethod
    def of(cls, inventory: Inventory, *, deadline_seconds: float) -> DriverGuard:
        """The guard of an inventory, watching its gate's calls where it has one."""
        calls = inventory.driver_calls() if isinstance(inventory, DriverCalls) else None
        return cls(calls, deadline_seconds=deadline_seconds)

    @property
    def busy(self) -> bool:
        """A call runs now (perhaps hung), or waits its turn."""
        return self._waiting > 0

    def when_answering(self, callback: Callable[[], None]) -> None:
        """Call `callback` (on the loop) each time the driver answers again after a hang."""
        self._answering.append(callback)

    async def run(self, task: str, call: Callable[[], T]) -> T | None:
        """`call()`'s answer once its turn came; None while a call hangs (this one is
        skipped), or when this one passed the deadline (it runs on in its thread; its answer
        is dropped). The call's own errors are raised as they are."""
        if self.hung:
            return None
        work = self._submit(task, call)
        if not await self._answered_in_time(work):
            return None
        return work.future.result()

    async def call(self, task: str, call: Callable[[], T]) -> T:
        """`call()`'s answer once its turn came and it ran within the deadline (its own
        errors are raised as they are). InventoryError naming the hung call at once while a
        call hangs, or when this one, or the one it waits behind, passes the deadline."""
        if self.hung:
            raise self._not_answering(task)
        work = self._submit(task, call)
        if not await self._answered_in_time(work):
            raise self._not_answering(task)
        return work.future.result()

    answer = call  # a rescan: refused, naming the hung call, while the driver hangs

    async def _answered_in_time(self, work: _Work[Any]) -> bool:
        """Whether `work` returned within the deadline of its own start. A call given up on
        before it started (the one ahead of it hangs) never runs; one that started runs on,
        its answer dropped."""
        while True:
            # asyncio.wait, not wait_for: it never cancels the call's future, and on Python
            # 3.11 wait_for can swallow a cancellation that comes as the call returns.
            done, _ = await asyncio.wait({work.future}, timeout=self._deadline)
            if done:
                return True
            if work.started.is_set() or self.hung:
                work.dropped = True
                self._overdue(work)
                return False

    def _submit(self, task: str, call: Callable[[], T]) -> _Work[T]:
        loop = asyncio.get_running_loop()
        work: _Work[T] = _Work(task, call, loop.create_future(), loop)
        self._waiting += 1
        work.future.add_done_callback(lambda _: self._returned(work))
        self._thread.submit(work)
        return work

    def _returned(self, work: _Work[Any]) -> None:
        self._waiting -= 1
        if work in self._late:
            self._late.remove(work)
            self._answered(work)

    def _not_answering(self, task: str) -> InventoryError:
        return InventoryError(
            f"the GPU driver is not answering ({self.describe()}); {task} cannot run until "
            "it does (`gpuallocctl doctor` shows the call and how long it has hung)"
        )

    def _overdue(self, work: _Work[Any]) -> None:
        if not work.started.is_set() or work in self._late:
            return  # it waited behind a hung call: that one is logged
        self._late.append(work)
        log.error(
            "the GPU driver has not answered for %.1f s (%s); %s is paused, the API answers "
            "from the ledger and the last sample",
            self._deadline,
            self.describe(),
            work.task,
        )

    def _answered(self, work: _Work[Any]) -> None:
        future = work.future
        if not future.cancelled() and future.exception() is not None:
            log.warning("the late %s failed: %s", work.task, future.exception())
        log.warning("the GPU driver answered again; %s resumes", work.task)
        if not self._late:
            for callback in self._answering:
                callback()

    @property
    def hung(self) -> bool:
        """A driver call runs past its deadline now: power calls are refused at once
        meanwhile, samples skipped, never made to wait on it."""
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


class GuardedPower:
    """The inventory's power calls through the driver guard: off the event loop, in turn
    with the samples and every other driver call, each within the driver's deadline. While a
    call hangs each is refused at once (NvmlError, as the driver's own refusals are): caps
    and the power budget never wait on a stuck driver (docs/driver-faults.md)."""

    def __init__(self, inventory: PowerMetering, guard: DriverGuard) -> None:
        self._inventory = inventory
        self._guard = guard

    @property
    def hung(self) -> bool:
        return self._guard.hung

    async def read(self) -> Mapping[str, PowerReading]:
        try:
            return await self._guard.call("power reading", self._inventory.power)
        except InventoryError as exc:
            raise NvmlError(exc.message, nvml_call="nvmlDeviceGetPowerUsage") from exc

    async def set_limit(self, uuid: str, limit_mw: int, task: str) -> None:
        def set_it() -> None:
            self._inventory.set_power_limit(uuid, limit_mw)

        try:
            await self._guard.call(task, set_it)
        except InventoryError as exc:
            raise NvmlError(exc.message, nvml_call="nvmlDeviceSetPowerManagementLimit") from exc


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
