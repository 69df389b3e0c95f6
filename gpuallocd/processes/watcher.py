"""Leases that die with their process.

A bound lease names the process that asked for it: the pid the kernel reported
(SO_PEERCRED) and that process's start time, so a pid reused by another process is never
mistaken for it. The watcher holds one pidfd per process (Linux 5.3 and later): the event
loop learns of the exit the moment it happens, kill -9 included. Where pidfd_open is not
available (older kernels, some sandboxes) the watcher falls back to checking
/proc/PID/stat every second. Either way a dead holder's lease ends within two seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gpuallocd.host.proc import process_start_time
from gpuallocd.model import Lease

__all__ = ["POLL_SECONDS", "ProcessWatcher"]

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0


@dataclass(eq=False)
class _Process:
    pid: int
    start_time: int
    leases: set[str] = field(default_factory=set)
    pidfd: int | None = None


class ProcessWatcher:
    """Calls `on_exit(lease_ids)` on the event loop when a bound lease's process exits."""

    def __init__(
        self,
        on_exit: Callable[[list[str]], None],
        start_time_of: Callable[[int], int | None] = process_start_time,
    ) -> None:
        self._on_exit = on_exit
        self._start_time_of = start_time_of
        self._processes: dict[tuple[int, int], _Process] = {}

    def watch(self, lease: Lease) -> None:
        """Start watching the process of a bound lease (nothing for a detached one)."""
        if not lease.bound or lease.pid is None or lease.pid_start_time is None:
            return
        key = (lease.pid, lease.pid_start_time)
        process = self._processes.get(key)
        if process is None:
            process = _Process(pid=lease.pid, start_time=lease.pid_start_time)
            self._processes[key] = process
            self._open_pidfd(process)
        process.leases.add(lease.id)
        if self._start_time_of(process.pid) != process.start_time:
            self._exited(key)  # gone before we could watch it

    def retain(self, lease_ids: Iterable[str]) -> None:
        """Stop watching for leases that ended; close pidfds nobody needs."""
        keep = set(lease_ids)
        for key, process in list(self._processes.items()):
            process.leases &= keep
            if not process.leases:
                self._forget(key)

    def watched(self) -> int:
        return len(self._processes)

    async def poll_forever(self) -> None:
        """The fallback for processes without a pidfd: look at /proc once a second."""
        while True:
            for key, process in list(self._processes.items()):
                if process.pidfd is None and self._start_time_of(process.pid) != process.start_time:
                    self._exited(key)
            await asyncio.sleep(POLL_SECONDS)

    def close(self) -> None:
        for key in list(self._processes):
            self._forget(key)

    def _open_pidfd(self, process: _Process) -> None:
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is None:
            return
        try:
            process.pidfd = pidfd_open(process.pid)
        except OSError as exc:
            log.debug("no pidfd for pid %d (%s); polling /proc instead", process.pid, exc)
            return
        key = (process.pid, process.start_time)
        asyncio.get_running_loop().add_reader(process.pidfd, self._exited, key)

    def _exited(self, key: tuple[int, int]) -> None:
        process = self._processes.get(key)
        if process is None:
            return
        lease_ids = sorted(process.leases)
        self._forget(key)
        log.debug("process %d exited; its lease(s): %s", process.pid, ", ".join(lease_ids))
        self._on_exit(lease_ids)

    def _forget(self, key: tuple[int, int]) -> None:
        process = self._processes.pop(key, None)
        if process is None or process.pidfd is None:
            return
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(process.pidfd)
        os.close(process.pidfd)
