"""The processes a bound lease covers: its holder (pidfd, or /proc polling) and every process
started under it (the /proc process tree), and what a revoke does to them.

A bound lease ends when the last of its processes has exited, never while one still runs;
a lease that asked for it (`on_revoke: "terminate"`, as `gpuallocctl run` does) has its
processes stopped when it is revoked: SIGTERM, then SIGKILL after the grace period.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from gpuallocd.allocator.families import ProcessFamilies, read_process_table
from gpuallocd.allocator.terminate import terminate_family
from gpuallocd.allocator.watcher import POLL_SECONDS, ProcessWatcher, process_start_time
from gpuallocd.model import Lease

__all__ = ["LeaseProcesses"]


class LeaseProcesses:
    """Watches holders and their families; tells `on_exit(lease_ids)` when a family is gone.

    `on_holder_exit(lease_ids)` hears of a holder that exited; its lease may still have
    processes started under it, which the next scan (`scan()`) finds.
    """

    def __init__(
        self,
        on_holder_exit: Callable[[list[str]], None],
        revoke_grace_seconds: float,
    ) -> None:
        self._watcher = ProcessWatcher(on_holder_exit)
        self._families = ProcessFamilies()
        self._scan_lock = asyncio.Lock()
        self._terminate_on_revoke: set[str] = set()
        self._revoke_grace = revoke_grace_seconds

    def watch(self, lease: Lease, *, terminate: bool = False) -> None:
        """Follow a bound lease's holder and the processes it starts (nothing if detached)."""
        self._watcher.watch(lease)
        self._families.track(lease)
        if terminate:
            self._terminate_on_revoke.add(lease.id)

    def retain(self, lease_ids: Iterable[str]) -> None:
        """Forget the leases not named: they ended."""
        keep = set(lease_ids)
        self._watcher.retain(keep)
        self._families.retain(keep)
        self._terminate_on_revoke &= keep

    def members(self, lease_id: str) -> list[int]:
        """The pids a bound lease covers now: its holder and the processes started under it."""
        return [pid for pid, _start in self._families.members(lease_id)]

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
        members = self._families.members(lease.id)
        terminate_family(members, holder, self._revoke_grace, process_start_time)

    async def poll_forever(self) -> None:
        """Poll holders that have no pidfd (once a second); the families are scanned by
        whoever calls `scan()` on the same interval."""
        await self._watcher.poll_forever()

    async def scan(self) -> list[str]:
        """Read /proc (off the event loop) and grow the families; the leases whose families
        are all gone."""
        if not self._families:
            return []
        async with self._scan_lock:
            loop = asyncio.get_running_loop()
            table = await loop.run_in_executor(None, read_process_table)
            return self._families.scan(table)

    def close(self) -> None:
        self._watcher.close()


SCAN_SECONDS = POLL_SECONDS
