"""The processes a bound lease covers: its holder (pidfd, or /proc polling) and every process
started under it (kernel events or /proc scans), and what a revoke does to them.

A bound lease ends when the last of its processes has exited, never while one still runs;
a lease that asked for it (`on_revoke: "terminate"`, as `gpuallocctl run` does) has its
processes stopped when it is revoked: SIGTERM, then SIGKILL after the grace period.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from gpuallocd.model import Lease
from gpuallocd.processes.events import FamilyEvents
from gpuallocd.processes.families import ProcessFamilies
from gpuallocd.processes.proc import descendants, process_start_time, read_process_table
from gpuallocd.processes.terminate import terminate_family
from gpuallocd.processes.tracking import PROC_SCAN, Tracking
from gpuallocd.processes.watcher import POLL_SECONDS, ProcessWatcher

__all__ = ["SCAN_SECONDS", "LeaseProcesses"]

SCAN_SECONDS = POLL_SECONDS


class LeaseProcesses:
    """Watches holders and their families.

    `on_holder_exit(lease_ids)` hears of a holder that exited; its lease may still have
    processes started under it. `on_gone(lease_ids)` hears of leases whose last process
    exited, told by the kernel's events (in `proc-scan` mode, `scan()` returns them).
    """

    def __init__(
        self,
        on_holder_exit: Callable[[list[str]], None],
        revoke_grace_seconds: float,
        tracking: Tracking | None = None,
        on_gone: Callable[[list[str]], None] | None = None,
    ) -> None:
        self._watcher = ProcessWatcher(on_holder_exit)
        self._families = ProcessFamilies()
        self._scan_lock = asyncio.Lock()
        self._terminate_on_revoke: set[str] = set()
        self._terminating: set[str] = set()
        self._revoke_grace = revoke_grace_seconds
        self.tracking = tracking or Tracking(PROC_SCAN)
        self._events: FamilyEvents | None = None
        if self.tracking.connector is not None:
            self._events = FamilyEvents(
                self.tracking.connector,
                self._families,
                on_gone or on_holder_exit,
                self._rescan_now,
            )

    @property
    def mode(self) -> str:
        return self.tracking.mode

    def start(self) -> list[str]:
        """Listen to the kernel's events (where the mode has them), then learn the families
        of the leases watched so far from /proc; the leases found with no process left."""
        if self._events is None:
            return []
        self._events.start()
        return self._rescan_now()

    def watch(self, lease: Lease, *, terminate: bool = False) -> None:
        """Follow a bound lease's holder and the processes it starts (nothing if detached)."""
        self._watcher.watch(lease)
        if self._events is None or lease.pid is None:
            self._families.track(lease)
        else:
            self._families.track(lease, descendants(lease.pid))
            if process_start_time(lease.pid) != lease.pid_start_time:
                self._families.exited(lease.pid)  # gone before the events could tell
        if terminate:
            self._terminate_on_revoke.add(lease.id)

    def retain(self, lease_ids: Iterable[str]) -> None:
        """Forget the leases not named: they ended."""
        keep = set(lease_ids)
        self._watcher.retain(keep)
        self._families.retain(keep | self._terminating)
        self._terminate_on_revoke &= keep

    def members(self, lease_id: str) -> list[int]:
        """The pids a bound lease covers now: its holder and the processes started under it."""
        return sorted({pid for pid, _start in self._families.members(lease_id)})

    def untracked(self, lease_ids: Iterable[str]) -> list[str]:
        """Of these leases, those with no known process left."""
        return [i for i in lease_ids if not self._families.members(i)]

    def revoked(self, lease: Lease) -> None:
        """A lease was revoked: stop its processes if it asked for that."""
        if lease.id not in self._terminate_on_revoke:
            return
        holder = None
        if lease.pid is not None and lease.pid_start_time is not None:
            holder = (lease.pid, lease.pid_start_time)
        self._terminating.add(lease.id)  # its family is followed until the last SIGKILL
        terminate_family(
            lambda: self._families.members(lease.id),
            holder,
            self._revoke_grace,
            done=lambda: self._terminating.discard(lease.id),
        )

    def stats(self) -> dict[str, Any]:
        """The mode, why, and what the kernel's events did (in `connector` mode)."""
        found: dict[str, Any] = {"mode": self.mode, "reason": self.tracking.reason}
        if self._events is not None:
            found.update(self._events.stats.to_json())
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
            return self._families.scan(table)

    def close(self) -> None:
        self._watcher.close()
        if self._events is not None:
            self._events.close()

    def _rescan_now(self) -> list[str]:
        """Read /proc on the loop itself, so that no event is applied halfway through: the
        events queued meanwhile follow, and correct what changed since."""
        return self._families.scan(read_process_table()) if self._families else []
