"""Leases whose processes are a cgroup: a transient systemd scope per bound lease.

At grant the holder (and whatever it already started) is moved into the scope
`gpuallocd-lease-ID.scope` of the slice `gpuallocd-leases.slice` (`systemd_bus.py`). From
then on the kernel keeps the family: a fork lands in its parent's cgroup, whatever the parent
does next (setsid, double fork, CLONE_PARENT), and a user cannot move a process out of a
cgroup owned by root. The lease's processes are the scope's `cgroup.procs`; when the last one
exits the kernel flips `cgroup.events` to `populated 0`, which inotify reports at once, and
systemd removes the empty scope. A revoke that terminates ends with systemd's KillUnit on the
scope, which catches a process forked while the others were being signalled.

A lease that follows its work past its holder (`following.py`), or that a process joins
(`gpuallocctl run --lease`), gets a second scope for that work, `gpuallocd-lease-ID-work.scope`
(`enclose_work`): started at the first such process, which moves into it, and joined by the
next ones while it runs (systemd moves a process into a running unit only where the unit is
delegated: this scope is, and its cgroup stays root's all the same). The lease's processes
are those of both scopes, and it ends when both are empty.

A lease taken by a process already in another lease's scope (a `gpu_lease` inside
`gpuallocctl run`, say) gets no scope: its process stays where it is, under the outer lease,
and the inner lease follows its family from /proc. A lease's end never kills what still runs
in its scope (as in the other modes: stopping work is a revoke's job); the scope then lasts
until its last process exits, and systemd removes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import Any

from gpuallocd.host.proc import process_start_time
from gpuallocd.model import Lease
from gpuallocd.processes.cgroups import (
    CGROUP_ROOT,
    LEASES_SLICE,
    in_slice,
    lease_of_scope,
    parse_proc_cgroup,
    populated,
    procs,
    scope_dir,
    scope_name,
)
from gpuallocd.processes.families import Member
from gpuallocd.processes.inotify import Inotify
from gpuallocd.processes.systemd_bus import BusError, SystemdManager

__all__ = ["LeaseScopes"]

log = logging.getLogger(__name__)

PROC = Path("/proc")


class LeaseScopes:
    """The scopes of bound leases; `on_gone(lease_ids)` hears of those left empty."""

    def __init__(
        self,
        on_gone: Callable[[list[str]], None],
        root: Path = CGROUP_ROOT,
        slice_unit: str = LEASES_SLICE,
    ) -> None:
        self._on_gone = on_gone
        self._root = root
        self._slice = slice_unit
        self._dirs: dict[str, list[Path]] = {}  # lease -> its scope, and its work's
        self._lease_of: dict[int, str] = {}  # inotify watch -> lease
        self._told: set[str] = set()
        self._inotify: Inotify | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._systemd = SystemdManager()
        self.started = 0
        self.failed = 0

    def __contains__(self, lease_id: object) -> bool:
        return lease_id in self._dirs

    def adopt(self, lease_id: str) -> bool:
        """Follow the scopes a lease already has (the daemon restarted); whether it has one."""
        found = False
        for work in (False, True):
            directory = scope_dir(lease_id, self._root, self._slice, work)
            if directory.is_dir():
                self._follow(lease_id, directory)
                found = True
        return found

    def lease_of(self, pid: int) -> str | None:
        """The lease whose scope the process is in (one that ended too: its scope lasts
        while a process is in it); None where it is in no lease's scope."""
        found = _cgroup_of(pid)
        if found is None or not in_slice(found, self._slice):
            return None
        return lease_of_scope(found.rsplit("/", 1)[-1])

    async def enclose(self, lease: Lease, pids: Sequence[int]) -> bool:
        """Move `pids` (the holder first) into a new scope for `lease`; whether they are
        in it now (False: the caller keeps following them from /proc)."""
        name = scope_name(lease.id)
        try:
            await self._systemd.start_scope(name, self._slice, pids, f"gpuallocd lease {lease.id}")
        except BusError as exc:
            self.failed += 1
            log.warning(
                "lease %s: no scope (%s); its processes are followed in /proc", lease.id, exc
            )
            return False
        directory = scope_dir(lease.id, self._root, self._slice)
        if not _moved(pids[0], directory, self._root):
            self.failed += 1
            log.warning("lease %s: its holder is not in %s; followed in /proc", lease.id, name)
            return False
        self.started += 1
        self._follow(lease.id, directory)
        return True

    async def enclose_work(self, lease: Lease, pids: Sequence[int]) -> bool:
        """Move `pids` into the scope of the lease's work: into it where it runs, else into
        a new one; whether the first of them is in it now (False: the caller follows them
        from /proc)."""
        name = scope_name(lease.id, work=True)
        directory = scope_dir(lease.id, self._root, self._slice, work=True)
        description = f"gpuallocd lease {lease.id}: its work"
        # where it runs, join it, else start it; the other way if that fails
        attempts = (
            (self._attach, self._start) if populated(directory) else (self._start, self._attach)
        )
        problems: list[str] = []
        for attempt in attempts:  # a scope may empty, or linger, between the look and the call
            try:
                await attempt(name, pids, description)
                problems = []
                break
            except BusError as exc:
                problems.append(str(exc))
        if problems or not _moved(pids[0], directory, self._root):
            self.failed += 1
            why = "; ".join(problems) or f"not in {name}"
            log.warning("lease %s: its work is in no scope (%s); followed in /proc", lease.id, why)
            return False
        self.started += 1
        self._follow(lease.id, directory)
        return True

    async def _attach(self, name: str, pids: Sequence[int], _description: str) -> None:
        await self._systemd.attach(name, pids)

    async def _start(self, name: str, pids: Sequence[int], description: str) -> None:
        await self._systemd.start_scope(name, self._slice, pids, description, delegate=True)

    def members(self, lease_id: str) -> list[Member]:
        """The processes in the lease's scopes now, each with its start time."""
        found = []
        for directory in self._dirs[lease_id]:
            for pid in procs(directory):
                start = process_start_time(pid)
                if start is not None:
                    found.append((pid, start))
        return sorted(found)

    def empty(self, lease_id: str) -> bool:
        return not any(populated(directory) for directory in self._dirs[lease_id])

    def sweep(self, lease_id: str) -> None:
        """SIGKILL to whatever is left in the lease's scopes (systemd's KillUnit), soon."""
        for directory in self._dirs.get(lease_id, ()):
            if populated(directory):
                self._spawn(self._kill_quietly(directory.name))

    def retain(self, lease_ids: Iterable[str]) -> None:
        """Stop following the scopes of leases not named (they ended)."""
        keep = set(lease_ids)
        for lease_id in [i for i in self._dirs if i not in keep]:
            del self._dirs[lease_id]
            self._told.discard(lease_id)
            for wd in [w for w, i in self._lease_of.items() if i == lease_id]:
                del self._lease_of[wd]
                if self._inotify is not None:
                    self._inotify.remove(wd)

    def stats(self) -> dict[str, Any]:
        return {
            "slice": self._slice,
            "scopes": len(self._dirs),
            "scopes_started": self.started,
            "scopes_failed": self.failed,
        }

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._spawn(self._systemd.close())  # runs while the daemon finishes its shutdown
        if self._inotify is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self._inotify.fileno())
            self._inotify.close()
            self._inotify = None

    def _follow(self, lease_id: str, directory: Path) -> None:
        dirs = self._dirs.setdefault(lease_id, [])
        if directory not in dirs:
            dirs.append(directory)
        self._told.discard(lease_id)  # a scope that came since it was last told empty
        with contextlib.suppress(OSError):  # removed already: empty, told below
            self._lease_of[self._watcher().add(str(directory / "cgroup.events"))] = lease_id
        if self.empty(lease_id):
            asyncio.get_running_loop().call_soon(self._tell, [lease_id])

    def _watcher(self) -> Inotify:
        if self._inotify is None:
            self._inotify = Inotify()
            asyncio.get_running_loop().add_reader(self._inotify.fileno(), self._readable)
        return self._inotify

    def _readable(self) -> None:
        if self._inotify is None:
            return
        fired = {self._lease_of[wd] for wd in self._inotify.read() if wd in self._lease_of}
        self._tell([i for i in fired if i in self._dirs and self.empty(i)])

    def _tell(self, lease_ids: list[str]) -> None:
        new = sorted(
            i for i in lease_ids if i in self._dirs and i not in self._told and self.empty(i)
        )
        if new:
            self._told.update(new)
            self._on_gone(new)

    async def _kill_quietly(self, name: str) -> None:
        try:
            await self._systemd.kill_unit(name, signal.SIGKILL)
        except BusError as exc:
            log.debug("KillUnit %s: %s", name, exc)  # empty and removed already

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _cgroup_of(pid: int) -> str | None:
    try:
        return parse_proc_cgroup((PROC / str(pid) / "cgroup").read_text())
    except OSError:
        return None


def _moved(pid: int, directory: Path, root: Path) -> bool:
    """Whether `pid` is in `directory` now that its scope's start job is done (or exited,
    leaving a scope behind: its children moved with it)."""
    found = _cgroup_of(pid)
    if found is None:
        return directory.is_dir()
    return found == "/" + str(directory.relative_to(root))
