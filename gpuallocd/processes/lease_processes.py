"""The processes a bound lease covers: its holder (pidfd, or /proc polling) and every process
started under it (kernel events, its systemd scope, or /proc scans), and what a revoke does
to them.

A bound lease ends when the last of its processes has exited, never while one still runs;
one that follows its work (`follow_work`) first takes in its owner's processes that carry its
id (`following.py`), and a process of its owner may join it (`join`, `gpuallocctl run
--lease`); a lease that asked for it (`on_revoke: "terminate"`, as `gpuallocctl run` does) has its
processes stopped when it is revoked: SIGTERM, then SIGKILL after the grace period.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from gpuallocd.errors import InvalidRequest
from gpuallocd.host.proc import (
    ProcessTable,
    descendants,
    process_start_time,
    read_parent,
    read_process_table,
)
from gpuallocd.model import Lease
from gpuallocd.processes.events import FamilyEvents
from gpuallocd.processes.families import Member, ProcessFamilies
from gpuallocd.processes.following import Following
from gpuallocd.processes.inherited import belongs, inherited, inheritors
from gpuallocd.processes.scopes import LeaseScopes
from gpuallocd.processes.terminate import kill_family, signal_members, terminate_family
from gpuallocd.processes.tracking import PROC_SCAN, SCOPE, Tracking
from gpuallocd.processes.watcher import POLL_SECONDS, ProcessWatcher

__all__ = ["SCAN_SECONDS", "TERMINATE", "LeaseProcesses"]

SCAN_SECONDS = POLL_SECONDS
TERMINATE = "terminate"  # a lease's `on_revoke` that has a revoke stop its processes
INIT = 1

log = logging.getLogger(__name__)


class LeaseProcesses:
    """Watches holders and their families.

    `on_holder_exit(lease_ids)` hears of a holder that exited; its lease may still have
    processes started under it. `on_gone(lease_ids)` hears of leases whose last process
    exited, told by the kernel's events or the scope's cgroup (in `proc-scan` mode, and
    for a lease whose scope could not be made, `scan()` returns them). `active(lease_id)`
    says whether a lease is still active (the allocator's word; by default every lease is).
    """

    def __init__(
        self,
        on_holder_exit: Callable[[list[str]], None],
        revoke_grace_seconds: float,
        tracking: Tracking | None = None,
        on_gone: Callable[[list[str]], None] | None = None,
        active: Callable[[str], bool] = lambda _lease_id: True,
    ) -> None:
        self._active = active
        self._on_holder_exit = on_holder_exit
        self._on_gone = on_gone or on_holder_exit
        self._following = Following(self._take, self._on_gone, active)
        self._watcher = ProcessWatcher(self._holder_exited)
        self._families = ProcessFamilies()
        self._scan_lock = asyncio.Lock()
        self._terminating: set[str] = set()
        self._revoke_grace = revoke_grace_seconds
        self.tracking = tracking or Tracking(PROC_SCAN)
        self._events: FamilyEvents | None = None
        self._leases: dict[str, Lease] = {}  # bound leases whose family is followed here
        # Where a clone(CLONE_PARENT) child of a member lands whose parent is no member: a
        # holder's parent (-> its leases), and init (the parent of orphans).
        self._holder_parents: dict[int, set[str]] = {INIT: set()}
        if self.tracking.connector is not None:
            self._events = FamilyEvents(
                self.tracking.connector,
                self._families,
                self._gone,
                self._rescan_now,
                stray=self._stray_fork,
                stray_parents=self._holder_parents,
            )
        self._scopes: LeaseScopes | None = None
        if self.tracking.mode == SCOPE:
            self._scopes = LeaseScopes(self._gone)

    @property
    def mode(self) -> str:
        return self.tracking.mode

    def start(self) -> list[str]:
        """Listen to the kernel's events (where the mode has them), then learn the families
        of the leases watched so far from /proc (the work of a holder that died while the
        daemon was down found again by its environment); the leases with no process left."""
        if self._events is None:
            if self._families:
                self._reattach(read_process_table())
            return []
        self._events.start()
        return self._rescan_now()

    def has_work(self, lease_id: str) -> bool:
        """Whether a process of the lease still runs (its holder, or work found again), or
        its work is still to be looked for (`following.py`)."""
        if self._following.pending(lease_id):
            return True
        return any(process_start_time(pid) == start for pid, start in self._members(lease_id))

    def watch(self, lease: Lease) -> None:
        """Follow a bound lease's holder and the processes it starts. A detached lease costs
        nothing: no process of its caller is looked at."""
        if not lease.bound or lease.pid is None or lease.pid_start_time is None:
            return
        self._following.add(lease)
        self._watcher.watch(lease)
        if self._scopes is not None and (lease.id in self._scopes or self._scopes.adopt(lease.id)):
            return  # its scope is its family
        self._follow(lease)
        if self._events is None:
            self._families.track(lease)
            return
        self._families.track(lease, descendants(lease.pid))  # its own family, no other
        if process_start_time(lease.pid) != lease.pid_start_time:
            self._families.exited(lease.pid)  # gone before the events could tell

    async def enclose(self, lease: Lease) -> None:
        """In `scope` mode, move a newly granted lease's holder, and what it already started,
        into a scope of its own (before its client hears of the grant); elsewhere nothing.
        A process in the scope of a lease that ended (its holder's earlier lease) moves; one
        in the scope of a lease still active (or being stopped by a revoke) stays there."""
        if self._scopes is None or lease.pid is None or lease.id in self._scopes:
            return
        if not lease.bound or process_start_time(lease.pid) != lease.pid_start_time:
            return  # detached, or the holder is gone: nothing to move
        if self._held(lease.pid):
            return  # under another lease: followed from /proc, not taken from that lease
        started = (pid for pid, _start in descendants(lease.pid))
        pids = [lease.pid, *(pid for pid in started if not self._held(pid))]
        if await self._scopes.enclose(lease, pids):
            self._families.forget(lease.id)
            self._unfollow(lease.id)

    def retain(self, lease_ids: Iterable[str]) -> None:
        """Forget the leases not named: they ended."""
        keep = set(lease_ids)
        self._watcher.retain(keep)
        self._following.retain(keep)
        self._families.retain(keep | self._terminating)
        if self._scopes is not None:
            self._scopes.retain(keep | self._terminating)
        for lease_id in [i for i in self._leases if i not in keep | self._terminating]:
            self._unfollow(lease_id)

    def members(self, lease_id: str) -> list[int]:
        """The pids a bound lease covers now: its holder and the processes started under it."""
        return sorted({pid for pid, _start in self._members(lease_id)})

    def untracked(self, lease_ids: Iterable[str]) -> list[str]:
        """Of these leases, those with no known process left."""
        return [i for i in lease_ids if not self._members(i)]

    def signal(self, lease: Lease, sig: int) -> int:
        """Send `sig` to the processes of `lease` but its holder (told of it on the lease's
        stream: `gpu_lease` raises it in its own process, `run` does not pass it on twice);
        how many were sent (a preemption's signal, docs/preemption.md)."""
        holder = _holder(lease)
        return signal_members([m for m in self._members(lease.id) if m != holder], sig)

    def kill(self, lease: Lease, delay_seconds: float = 0.0) -> None:
        """SIGKILL to what is left of the processes of `lease` `delay_seconds` from now, its
        holder a second later (a preempted lease, acknowledged or at its deadline)."""
        self._terminating.add(lease.id)  # its family is followed until the last SIGKILL
        scopes = self._scopes if self._in_scope(lease.id) else None
        kill_family(
            lambda: self._members(lease.id),
            _holder(lease),
            delay_seconds,
            done=lambda: self._terminated(lease.id, scopes),
        )

    def revoked(self, lease: Lease) -> None:
        """A lease was revoked: stop its processes if it asked for that (`on_revoke`, as the
        ledger records it: a restart or a dead `run` changes nothing)."""
        if lease.on_revoke != TERMINATE:
            return
        holder = _holder(lease)
        self._terminating.add(lease.id)  # its family is followed until the last SIGKILL
        scopes = self._scopes if self._in_scope(lease.id) else None
        terminate_family(
            lambda: self._members(lease.id),
            holder,
            self._revoke_grace,
            done=lambda: self._terminated(lease.id, scopes),
        )

    def stats(self) -> dict[str, Any]:
        """The mode, why, and what the kernel's events did (in `connector` mode)."""
        found: dict[str, Any] = {"mode": self.mode, "reason": self.tracking.reason}
        if self._events is not None:
            found.update(self._events.stats.to_json())
        if self._scopes is not None:
            found.update(self._scopes.stats())
        return found

    async def poll_forever(self) -> None:
        """Poll holders that have no pidfd (once a second); the families are scanned by
        whoever calls `scan()` on the same interval."""
        await self._watcher.poll_forever()

    async def scan(self) -> list[str]:
        """In `proc-scan` mode, read /proc (off the event loop) and grow the families; the
        leases whose families are all gone. With the kernel's events, nothing to do."""
        if not self._families or self._events is not None:
            return []
        async with self._scan_lock:
            loop = asyncio.get_running_loop()
            table = await loop.run_in_executor(None, read_process_table)
            return self._ending(self._families.scan(table))

    async def join(self, lease: Lease, pid: int) -> None:
        """Process `pid` of the lease's owner asked to join the bound `lease` (the daemon
        checked whose it is): it and what it starts are the lease's processes from now on,
        in its work scope in `scope` mode."""
        start = process_start_time(pid)
        if start is None or not await self._take(lease, [(pid, start)]):
            raise InvalidRequest("the requesting process is gone; nothing joins the lease")

    def close(self) -> None:
        self._following.close()
        self._watcher.close()
        if self._events is not None:
            self._events.close()
        if self._scopes is not None:
            self._scopes.close()

    def _in_scope(self, lease_id: str) -> bool:
        return self._scopes is not None and lease_id in self._scopes

    def _members(self, lease_id: str) -> list[Member]:
        """Its scopes' processes where it has them, and the family followed in /proc."""
        found = self._families.members(lease_id)
        if self._scopes is not None and lease_id in self._scopes:
            return sorted({*found, *self._scopes.members(lease_id)})
        return found

    def _holder_exited(self, lease_ids: list[str]) -> None:
        """A holder exited: its lease is looked at now, unless it waits for its look."""
        now = self._following.divert(lease_ids)
        if now:
            self._on_holder_exit(now)

    def _gone(self, lease_ids: list[str]) -> None:
        """The kernel told of leases whose last process exited (their family, or scope)."""
        now = self._ending(lease_ids)
        if now:
            self._on_gone(now)

    def _ending(self, lease_ids: list[str]) -> list[str]:
        """Of leases that lost their last process where one way follows them, those that
        end: not one that waits for its look, nor one whose processes another way follows
        still run (a scope's work beside a family followed in /proc)."""
        return [i for i in self._following.divert(lease_ids) if not self.has_work(i)]

    async def _take(self, lease: Lease, members: list[Member]) -> bool:
        """Follow `members`, and what they started, as processes of `lease` (in its work scope
        where they may move; one in the scope of another active lease stays there, followed
        from /proc); whether one of its processes runs now."""
        rest = members
        if self._scopes is not None:
            rest = [m for m in members if self._scopes.lease_of(m[0]) != lease.id]
            free = [pid for pid, _start in rest if not self._held(pid)]
            started = (child for pid in free for child, _start in descendants(pid))
            pids = [*free, *(child for child in started if not self._held(child))]
            if free and await self._scopes.enclose_work(lease, pids):
                rest = [m for m in rest if m[0] not in free]
        if rest:
            found = [*rest, *(child for pid, _start in rest for child in descendants(pid))]
            self._families.add(lease.id, found)
            for pid, start in found:
                if process_start_time(pid) != start:
                    self._families.exited(pid)  # gone before the events could tell
        return any(process_start_time(pid) == start for pid, start in self._members(lease.id))

    def _terminated(self, lease_id: str, scopes: LeaseScopes | None) -> None:
        """The last SIGKILL went out: in a scope, systemd kills what a fork slipped past it."""
        if scopes is not None:
            scopes.sweep(lease_id)
        self._terminating.discard(lease_id)

    def _rescan_now(self) -> list[str]:
        """Read /proc on the loop itself, so that no event is applied halfway through: the
        events queued meanwhile follow, and correct what changed since. A process whose
        parents were lost with the events is found by the lease in its environment."""
        if not self._families:
            return []
        table = read_process_table()
        self._reattach(table)
        return self._ending(self._families.scan(table))

    def _follow(self, lease: Lease) -> None:
        if lease.pid is None or lease.pid_start_time is None:
            return
        self._leases[lease.id] = lease
        parent = read_parent(lease.pid)
        if parent is not None:
            self._holder_parents.setdefault(parent, set()).add(lease.id)

    def _held(self, pid: int) -> bool:
        """Whether the process is in the scope of a lease still active, or being stopped."""
        assert self._scopes is not None
        lease_id = self._scopes.lease_of(pid)
        return lease_id is not None and (self._active(lease_id) or lease_id in self._terminating)

    def _unfollow(self, lease_id: str) -> None:
        if self._leases.pop(lease_id, None) is None:
            return
        for parent, leases in list(self._holder_parents.items()):
            leases.discard(lease_id)
            if not leases and parent != INIT:
                del self._holder_parents[parent]

    def _reattach(self, table: ProcessTable) -> None:
        found = inheritors(table, self._leases, self._families.covered())
        for lease_id, member in found:
            self._families.attach(lease_id, member)
        if found:
            log.info("process tracking: %d processes found again by their lease", len(found))

    def _stray_fork(self, child: Member) -> bool:
        """A holder's parent forked (where a `clone(CLONE_PARENT)` child of a member lands),
        or such a child that joined nothing ran a new program: the child joins the lease its
        environment names, if it is its owner's. Whether it is settled: it joined, or no
        lease is followed here (its later execs are not looked at)."""
        if not self._leases:
            return True  # no lease to join: no environment read on every fork of init
        got = inherited(child[0])
        lease = self._leases.get(got.lease_id) if got is not None else None
        if got is not None and lease is not None and belongs(got, lease):
            self._families.attach(lease.id, child)
            return True
        return False


def _holder(lease: Lease) -> Member | None:
    """The process that asked for a bound lease, as the kernel reported it."""
    if lease.pid is None or lease.pid_start_time is None:
        return None
    return (lease.pid, lease.pid_start_time)
