"""Opt-in enforcement of memory shares, from the per-process memory the inventory samples.

A process belongs to a share's lease when its environment carries the lease's id
(`GPUALLOCD_LEASE_ID`, which `gpu_lease` and `gpuallocctl run` export to the job and its
children) or it is the lease's own process. When the processes of a lease use more memory
on a GPU than the lease's share there, the lease is warned: a `warned` event in its history
and a log line. With `kill`, a lease still over its share at a later sample has those
processes killed (SIGKILL, through a pidfd, each checked to be the lease's still) and an
`enforced` event recorded. Memory is only what the driver
reports per process; a share is not a hardware limit (MIG instances are).
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gpuallocd.host.proc import environ_value, process_owner, process_start_time, read_environ
from gpuallocd.model import Lease, LeaseEvent, LiveState, UnitKind
from gpuallocd.processes.signals import signal_checked

__all__ = ["Overrun", "ShareEnforcer", "lease_id_of_process"]

log = logging.getLogger(__name__)

LEASE_ID_VARIABLE = b"GPUALLOCD_LEASE_ID"

Note = Callable[[str, LeaseEvent, str], None]


def lease_id_of_process(pid: int) -> str | None:
    """The GPUALLOCD_LEASE_ID in a process's environment, where it can be read."""
    environ = read_environ(pid)
    return None if environ is None else environ_value(environ, LEASE_ID_VARIABLE)


@dataclass(frozen=True, slots=True)
class Overrun:
    """A lease's processes on one GPU, and what they use against the share's size."""

    lease: Lease
    gpu_uuid: str
    pids: tuple[int, ...]
    used_bytes: int
    share_bytes: int

    def describe(self) -> str:
        return (
            f"processes {', '.join(map(str, self.pids))} use {self.used_bytes / 2**30:.1f} GiB "
            f"of a {self.share_bytes / 2**30:.1f} GiB share on GPU {self.gpu_uuid}"
        )


def find_overruns(
    leases: Iterable[Lease],
    live: Mapping[str, LiveState],
    lease_of: Callable[[int], str | None] = lease_id_of_process,
) -> list[Overrun]:
    """Every share whose own processes use more than its size, in one sample."""
    found = []
    for lease in leases:
        for unit in lease.gpus:
            if unit.kind is not UnitKind.SHARE or unit.memory_bytes is None:
                continue
            processes = [
                p
                for p in live.get(unit.uuid, LiveState()).processes
                if p.pid == lease.pid or (p.uid == lease.owner_uid and lease_of(p.pid) == lease.id)
            ]
            used = sum(p.used_memory_bytes or 0 for p in processes)
            if used > unit.memory_bytes:
                pids = tuple(p.pid for p in processes)
                found.append(Overrun(lease, unit.uuid, pids, used, unit.memory_bytes))
    return found


def _belongs(pid: int, lease: Lease) -> bool:
    """Whether the process `pid` names now is one of the lease's."""
    if pid == lease.pid:
        return process_start_time(pid) == lease.pid_start_time
    # the lease id in an environment is anyone's to write: only its owner's processes count
    return process_owner(pid) == lease.owner_uid and lease_id_of_process(pid) == lease.id


def _kill(pid: int, lease: Lease) -> None:
    """SIGKILL to `pid` if it is still the lease's (checked through a pidfd: a pid reused
    since the sample is never hit)."""
    with contextlib.suppress(PermissionError):
        signal_checked(pid, signal.SIGKILL, lambda p: _belongs(p, lease))


class ShareEnforcer:
    """Warns (and with `kill`, then kills) shares over their size, one sample at a time."""

    def __init__(
        self,
        mode: str,
        note: Note,
        *,
        kill: Callable[[int, Lease], None] = _kill,
        lease_of: Callable[[int], str | None] = lease_id_of_process,
    ) -> None:
        self.mode = mode
        self._note = note
        self._kill = kill
        self._lease_of = lease_of
        self._warned: set[str] = set()
        self._killed: set[int] = set()

    def check(self, leases: Iterable[Lease], live: Mapping[str, LiveState]) -> list[Overrun]:
        """Act on this sample's overruns (none where enforcement is off); they are returned."""
        if self.mode == "off":
            return []
        overruns = find_overruns(leases, live, self._lease_of)
        for overrun in overruns:
            lease_id = overrun.lease.id
            if self.mode == "kill" and lease_id in self._warned:
                self._enforce(overrun)
            elif lease_id not in self._warned:
                log.warning("lease %s is over its share: %s", lease_id, overrun.describe())
                self._note(lease_id, LeaseEvent.WARNED, overrun.describe())
        self._warned = {o.lease.id for o in overruns}
        return overruns

    def _enforce(self, overrun: Overrun) -> None:
        """Kill the overrun's processes (each once: the driver may list it a while after)."""
        fresh = [pid for pid in overrun.pids if pid not in self._killed]
        if not fresh:
            return
        log.warning("lease %s: killing %s", overrun.lease.id, overrun.describe())
        for pid in fresh:
            self._kill(pid, overrun.lease)
        self._killed.update(fresh)
        self._note(overrun.lease.id, LeaseEvent.ENFORCED, f"killed: {overrun.describe()}")
