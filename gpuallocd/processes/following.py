"""Leases that follow their work past their holder (`follow_work`, as `gpuallocctl mcp` asks).

An agent's lease is bound to its MCP server, but the agent's commands are started by its
client, beside the server and not under it: they carry the lease in their environment
(`export_env`), not in their ancestry. When the holder of a lease that asked to follow its
work exits (the session ended), the lease looks once, off the event loop, for the processes
that carry it on: the owner's own (real, effective and saved uid all the owner's:
`own_uid`), started at or after the grant, whose environment names this lease
(GPUALLOCD_LEASE_ID). What a process's environment says only chooses among its owner's
leases (`Decision.INHERITED`, processes/inherited.py): another user's process naming the
lease is never taken, nor a set-user-ID program. Those found, and what they started, become
the lease's processes (its work scope in `scope` mode), so the lease ends when the last of
them has exited, as a `run` lease does; with none, it ends at once, as before. Work started
after the holder exited is not looked for, nor is a process that made itself non-dumpable
(its /proc entry is root's).

The look is the cost of one lease's end, paid once: a stat of each /proc entry, and reads
only of the owner's processes started after the grant (`carriers`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from gpuallocd.host.proc import CLOCK_TICKS, PROC, pids_owned_by, process_start_time
from gpuallocd.model import Lease
from gpuallocd.processes.families import Member
from gpuallocd.processes.inherited import belongs, inherited

__all__ = ["Following", "carriers", "grant_tick"]

log = logging.getLogger(__name__)


def _boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def grant_tick(lease: Lease, now: float | None = None, since_boot: float | None = None) -> int:
    """When `lease` was granted, in clock ticks since boot (the unit of a process's start
    time), never before its holder started: a process older than that cannot have been
    given the lease's id by whoever received it."""
    wall = time.time() if now is None else now
    booted = wall - (_boottime() if since_boot is None else since_boot)
    tick = int((lease.created_at - booted) * CLOCK_TICKS) - 1  # a tick's rounding either way
    return max(tick, lease.pid_start_time or 0)


def carriers(lease: Lease, proc: Path = PROC) -> list[Member]:
    """The processes that may carry `lease` on: its owner's own, started at or after the
    grant, whose environment names it; each with its start time, in pid order."""
    since = grant_tick(lease)
    found = []
    for pid in sorted(pids_owned_by(lease.owner_uid, proc)):
        start = process_start_time(pid, proc)
        if start is None or start < since:
            continue
        if belongs(inherited(pid, str(proc)), lease) and process_start_time(pid, proc) == start:
            found.append((pid, start))  # the same process after the reads: not a reused pid
    return found


Take = Callable[[Lease, list[Member]], Awaitable[bool]]


class Following:
    """The leases that follow their work, and the one look each gets when its holder exits.

    `take(lease, members)` makes the processes found the lease's own and says whether one
    of them still runs; `gone(lease_ids)` hears of a lease whose look found nothing to
    carry it, and `active(lease_id)` whether a lease is still active.
    """

    def __init__(
        self,
        take: Take,
        gone: Callable[[list[str]], None],
        active: Callable[[str], bool],
        find: Callable[[Lease], list[Member]] = carriers,
    ) -> None:
        self._take = take
        self._gone = gone
        self._active = active
        self._find = find
        self._leases: dict[str, Lease] = {}
        self._looking: set[str] = set()
        self._looked: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, lease: Lease) -> None:
        """Follow a bound lease that asked to follow its work (nothing for any other)."""
        if lease.bound and lease.follow_work:
            self._leases[lease.id] = lease

    def __contains__(self, lease_id: object) -> bool:
        return lease_id in self._leases

    def retain(self, lease_ids: Iterable[str]) -> None:
        keep = set(lease_ids)
        for lease_id in [i for i in self._leases if i not in keep]:
            del self._leases[lease_id]
            self._looked.discard(lease_id)

    def pending(self, lease_id: str) -> bool:
        """Whether the lease's look is still to come or under way."""
        return lease_id in self._leases and lease_id not in self._looked

    def divert(self, lease_ids: Iterable[str]) -> list[str]:
        """Of leases whose holder exited (or whose processes are gone), those that end now:
        a lease that follows its work waits for its look, which is started here."""
        now = []
        for lease_id in lease_ids:
            if not self.pending(lease_id):
                now.append(lease_id)
            elif lease_id not in self._looking:
                self._looking.add(lease_id)
                self._spawn(self._look(self._leases[lease_id]))
        return now

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _look(self, lease: Lease) -> None:
        kept = False
        try:
            found = await asyncio.get_running_loop().run_in_executor(None, self._find, lease)
            if found and self._active(lease.id):
                kept = await self._take(lease, found)
            log.info(
                "lease %s: holder %s exited; %d process(es) carrying the lease keep it",
                lease.id,
                lease.pid,
                len(found) if kept else 0,
            )
        except Exception:  # a look that failed ends the lease, as with no work found
            log.exception("lease %s: looking for its work failed", lease.id)
        finally:
            self._looking.discard(lease.id)
            self._looked.add(lease.id)
        if not kept:
            self._gone([lease.id])

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
