"""Families kept current by the kernel's process events, on the event loop.

The connector's socket is read when the loop says it is readable. A fork by a member makes
the child a member at once (with the start time it really has: read from /proc and checked
against the time of the fork event, so a pid reused before we looked is never adopted); an
exit takes a member out when its whole thread group has exited (the kernel reports each
thread's exit; a process whose main thread exits first lives on in its other threads, and is
looked at again until the last of them is gone), and a family left empty ends its lease.
Lost events (the kernel's buffer overran) make the families learn everything again from
/proc, with the lease in their environment for those whose parents were lost. How long a
fork took to be covered is kept for the numbers shown to people (`stats`) and the benchmark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Container
from dataclasses import dataclass, field

from gpuallocd.host.proc import CLOCK_TICKS, process_start_time, thread_group_lives
from gpuallocd.processes.connector import Connector, EventKind, Overrun, ProcEvent
from gpuallocd.processes.families import UNKNOWN_START, Member, ProcessFamilies

__all__ = ["EXEC_CHECKS", "EventStats", "FamilyEvents", "start_matches"]

log = logging.getLogger(__name__)

BATCH = 2048  # events per wake-up of the loop: requests run between batches
KEPT_LATENCIES = 10_000
NS = 1_000_000_000
RECHECK_SECONDS = 1.0  # how often a process whose main thread exited is looked at again


def boottime_offset_ns() -> int:
    """CLOCK_BOOTTIME minus CLOCK_MONOTONIC: the time the machine spent suspended."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()


def start_matches(start_ticks: int, fork_ns: int, offset_ns: int) -> bool:
    """Whether a process that started at `start_ticks` (clock ticks since boot) is the one
    forked at `fork_ns` (CLOCK_MONOTONIC): the kernel takes the start time just before it
    sends the event, so the two fall in the same tick or the one before."""
    expected = (fork_ns + offset_ns) * CLOCK_TICKS // NS
    return expected - 1 <= start_ticks <= expected + 1


def _latencies() -> deque[int]:
    return deque(maxlen=KEPT_LATENCIES)


@dataclass
class EventStats:
    """What the events did: forks covered, how fast (the last KEPT_LATENCIES, in ns),
    overruns (each a /proc rescan)."""

    events: int = 0
    covered: int = 0
    overruns: int = 0
    latencies_ns: deque[int] = field(default_factory=_latencies)

    def to_json(self) -> dict[str, float | int]:
        found: dict[str, float | int] = {
            "events": self.events,
            "forks_covered": self.covered,
            "overruns": self.overruns,
        }
        kept = sorted(self.latencies_ns)
        if kept:
            found["fork_to_covered_p50_ms"] = kept[len(kept) // 2] / 1e6
            found["fork_to_covered_p99_ms"] = kept[min(len(kept) - 1, len(kept) * 99 // 100)] / 1e6
        return found


EXEC_CHECKS = 4  # the execs of a stray child that joined nothing whose environment is read


class FamilyEvents:
    """Applies the connector's events to `families`; `on_gone(lease_ids)` hears of the
    leases whose last process exited; `rescan()` relearns the families after an overrun and
    returns the leases it found empty."""

    def __init__(
        self,
        connector: Connector,
        families: ProcessFamilies,
        on_gone: Callable[[list[str]], None],
        rescan: Callable[[], list[str]],
        stray: Callable[[Member], bool] | None = None,
        stray_parents: Container[int] = (),
    ) -> None:
        """`stray(child)` hears of a fork by one of `stray_parents` (not members: a holder's
        parent, where a `clone(CLONE_PARENT)` child of a member lands), and whether it is
        settled (it joined a lease); one that is not is asked about again at its execs, so that
        its environment counts as it is after the exec, whenever the events are read (at
        its first EXEC_CHECKS execs: `nohup env VAR=... job` gives the id at the third; a
        process that execs in a loop costs no more than a few forks)."""
        self._stray = stray
        self._stray_parents = stray_parents
        # A stray child that joined nothing, by tgid: it, and the execs still to look at.
        self._unjoined: dict[int, tuple[Member, int]] = {}
        self._connector = connector
        self._families = families
        self._on_gone = on_gone
        self._rescan = rescan
        self.stats = EventStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._leaderless: dict[int, set[int]] = {}  # tgid -> its threads seen exiting
        self._recheck: asyncio.TimerHandle | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(self._connector.fileno(), self.readable)
        self._loop = loop

    def readable(self) -> None:
        """Take what is waiting (one batch) and apply it."""
        try:
            events = self._connector.read(BATCH)
        except Overrun:
            self.stats.overruns += 1
            log.warning("process events were lost (a full buffer): families read from /proc")
            self._connector.discard()  # older than what /proc says now
            self._unjoined.clear()  # exits may have been lost with the rest
            self._tell(self._rescan())
            return
        self._tell(self.apply(events))

    def apply(self, events: list[ProcEvent]) -> list[str]:
        """Apply events in order; the leases left without a process."""
        gone: list[str] = []
        offset: int | None = None
        families = self._families
        for event in events:
            if event.kind is EventKind.EXIT and event.is_process and self._unjoined:
                self._unjoined.pop(event.tgid, None)
            if event.kind is EventKind.FORK and families.covers(event.parent_tgid):
                if not event.is_process:
                    continue  # a new thread: its process is what counts
                offset = boottime_offset_ns() if offset is None else offset
                families.forked(event.parent_tgid, _member(event, offset))
                self._covered(event)
            elif event.kind is EventKind.FORK and event.parent_tgid in self._stray_parents:
                if event.is_process and self._stray is not None:
                    offset = boottime_offset_ns() if offset is None else offset
                    self._stray_forked(_member(event, offset))
            elif event.kind is EventKind.EXEC and event.tgid in self._unjoined:
                self._stray_execed(event.tgid)
            elif (
                event.kind is EventKind.EXIT
                and families.covers(event.tgid)
                and self._group_exited(event)
            ):
                gone += families.exited(event.tgid)
        self.stats.events += len(events)
        return gone

    def _stray_forked(self, child: Member) -> None:
        assert self._stray is not None
        if not self._stray(child):
            self._unjoined[child[0]] = (child, EXEC_CHECKS)

    def _stray_execed(self, tgid: int) -> None:
        """A stray child that joined nothing ran a new program: its environment now is the
        one it was given at this exec."""
        assert self._stray is not None
        child, left = self._unjoined.pop(tgid)
        if self._families.covers(tgid) or self._stray(child):
            return  # a member now (another way in, or this one)
        if left > 1:
            self._unjoined[tgid] = (child, left - 1)

    def _group_exited(self, event: ProcEvent) -> bool:
        """Whether the thread that exited was the last of its process."""
        exited = self._leaderless.get(event.tgid)
        if exited is None:
            if not event.is_process:
                return False  # another thread, while the main one runs
            exited = self._leaderless[event.tgid] = set()
        exited.add(event.pid)
        if thread_group_lives(event.tgid, exited=exited):
            self._recheck_later()
            return False
        del self._leaderless[event.tgid]
        return True

    def _recheck_later(self) -> None:
        if self._loop is not None and self._recheck is None:
            self._recheck = self._loop.call_later(RECHECK_SECONDS, self._recheck_leaderless)

    def _recheck_leaderless(self) -> None:
        """Processes whose main thread exited: those whose last thread is gone too leave."""
        self._recheck = None
        gone: list[str] = []
        for tgid, exited in list(self._leaderless.items()):
            if not self._families.covers(tgid):
                del self._leaderless[tgid]
            elif not thread_group_lives(tgid, exited=exited):
                del self._leaderless[tgid]
                gone += self._families.exited(tgid)
        if self._leaderless:
            self._recheck_later()
        self._tell(gone)

    def close(self) -> None:
        if self._recheck is not None:
            self._recheck.cancel()
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._connector.fileno())
        self._connector.close()

    def _covered(self, event: ProcEvent) -> None:
        self.stats.covered += 1
        self.stats.latencies_ns.append(time.monotonic_ns() - event.timestamp_ns)

    def _tell(self, gone: list[str]) -> None:
        if gone:
            self._on_gone(sorted(set(gone)))


def _member(event: ProcEvent, offset_ns: int) -> Member:
    """The forked child as a member: its start time where it is still the process forked."""
    start = process_start_time(event.pid)
    if start is None or not start_matches(start, event.timestamp_ns, offset_ns):
        return event.pid, UNKNOWN_START
    return event.pid, start
