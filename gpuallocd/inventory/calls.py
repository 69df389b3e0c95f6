"""Which vendor-library calls are running now, and for how long: the record that lets the
daemon name a driver call that hangs.

Every call through a gate (NVML, amdsmi) is entered here for as long as it runs, from
whichever thread makes it. A call that has run longer than its deadline (plus the wait it
asked for itself, as `nvmlEventSetWait` does) is overdue: health, diagnostics and
`gpuallocctl doctor` name it until it returns (docs/driver-faults.md).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["CallWatch", "InFlight"]


@dataclass(frozen=True, slots=True)
class InFlight:
    """One call running now: its name, when it began (monotonic seconds), the thread
    making it, and the seconds it may take by its own asking (a wait's timeout)."""

    call: str
    started: float
    thread: str
    allowance_seconds: float = 0.0

    def seconds(self, now: float) -> float:
        return max(0.0, now - self.started)

    def overdue(self, now: float, deadline_seconds: float) -> bool:
        return self.seconds(now) > deadline_seconds + self.allowance_seconds

    def to_json(self, now: float) -> dict[str, object]:
        return {"call": self.call, "seconds": round(self.seconds(now), 3), "thread": self.thread}


class CallWatch:
    """The calls in flight through one gate; thread-safe and cheap to enter and leave (a
    sample makes some thirty calls: entering holds no lock, only CPython's atomic dict
    operations, and the thread's name is looked up when someone asks)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self._running: dict[int, tuple[str, float, int, float]] = {}
        self._ids = itertools.count()

    def enter(self, call: str, allowance_seconds: float = 0.0) -> int:
        """`call` runs from now on, in this thread; the key to `leave` with."""
        key = next(self._ids)
        self._running[key] = (call, self.monotonic(), threading.get_ident(), allowance_seconds)
        return key

    def leave(self, key: int) -> None:
        self._running.pop(key, None)

    @contextlib.contextmanager
    def track(self, call: str, *, allowance_seconds: float = 0.0) -> Iterator[None]:
        """Hold `call` as running for the duration of the block."""
        key = self.enter(call, allowance_seconds)
        try:
            yield
        finally:
            self.leave(key)

    def in_flight(self) -> list[InFlight]:
        """The calls running now, oldest first."""
        running = self._running.copy()
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        found = [
            InFlight(call, started, names.get(ident, str(ident)), allowance)
            for call, started, ident, allowance in running.values()
        ]
        return sorted(found, key=lambda entry: entry.started)

    def overdue(self, deadline_seconds: float) -> list[InFlight]:
        """The calls running longer than `deadline_seconds` beyond their own allowance."""
        now = self.monotonic()
        return [e for e in self.in_flight() if e.overdue(now, deadline_seconds)]
