"""Opt-in enforcement of memory shares, from the per-process memory the inventory samples.

A process belongs to a share's lease when it is the lease's own process, or when it is the
lease owner's and its environment names the lease (`GPUALLOCD_LEASE_ID`, which `gpu_lease`
and `gpuallocctl run` export to the job and its children): the id anyone may write only
chooses among the leases of the process's owner (`Decision.SHARE_COUNT`, host/trust.py).
When the processes of a lease use more memory on a GPU than the lease's share there, the
lease is warned: a `warned` event in its history and a log line. With `kill`, a lease still
over its share at a later sample has those processes killed (SIGKILL, through a pidfd, each
checked to be the lease's still) and an `enforced` event recorded. Memory is only what the
driver reports per process; a share is not a hardware limit (MIG instances are).
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gpulease import lease_id

from gpuallocd.host.proc import process_owner, process_start_time
from gpuallocd.host.trust import Decision, Written, choose, environment
from gpuallocd.model import Lease, LeaseEvent, LiveState, UnitKind
from gpuallocd.processes.signals import signal_checked

__all__ = ["Overrun", "ShareEnforcer", "lease_claims"]

log = logging.getLogger(__name__)

LEASE_ID_VARIABLE = lease_id.LEASE_ID_VARIABLE.encode()

Note = Callable[[str, LeaseEvent, str], None]
Claims = Callable[[int], Iterable[Written]]


def lease_claims(pid: int) -> tuple[Written, ...]:
    """Every GPUALLOCD_LEASE_ID in a process's environment (none where it cannot be read)."""
    found = environment(Decision.SHARE_COUNT, pid, LEASE_ID_VARIABLE)
    return () if found is None else found[LEASE_ID_VARIABLE]


def _named(lease: Lease, owner: int | None, pid: int, lease_of: Claims) -> bool:
    """Whether process `pid` of `owner` is the lease's by its environment: what it says only
    chooses among the leases of its owner (another user's environment is not even read)."""
    if owner != lease.owner_uid:
        return False
    return choose(Decision.SHARE_COUNT, lease_of(pid), {lease.id: lease}) is lease


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
    lease_of: Claims = lease_claims,
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
                if p.pid == lease.pid or _named(lease, p.uid, p.pid, lease_of)
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
    return _named(lease, process_owner(pid), pid, lease_claims)


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
        lease_of: Claims = lease_claims,
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
