"""The lease a process's work inherits through its environment, for when its ancestry was lost.

`gpu_lease` (and so `gpuallocctl run`) puts `GPUALLOCD_LEASE_ID` in the environment of what
it starts, and `GPUALLOCD_ON_REVOKE=terminate` where the lease asked a revoke to stop its
work; every process started below inherits both. Where the daemon cannot tell a process's
family by its parents (events lost to an overrun, a restart after the holder died, a
`clone(CLONE_PARENT)` child whose parent is not a member), it reads them from
/proc/PID/environ: the environment the process was started with (what it sets later is not
there). A user can write anything there, so a process is taken into a lease only when its
owner owns the lease (and started after its holder): nobody can hang their work on another
user's lease, nor have another user's revoke stop it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuallocd.host.proc import ProcessTable, environ_value, own_uid, read_environ
from gpuallocd.model import Lease
from gpuallocd.processes.families import Member

__all__ = ["Inherited", "belongs", "inherited", "inheritors"]

LEASE_KEY = b"GPUALLOCD_LEASE_ID"
ON_REVOKE_KEY = b"GPUALLOCD_ON_REVOKE"


@dataclass(frozen=True, slots=True)
class Inherited:
    """What a process's environment says of its lease, and whose process it is."""

    uid: int
    lease_id: str
    terminate: bool  # GPUALLOCD_ON_REVOKE=terminate


def inherited(pid: int, proc: str = "/proc") -> Inherited | None:
    """The lease in `pid`'s environment; None without one, when it cannot be read (another
    user's environment takes CAP_SYS_PTRACE, which the unit grants), or when the process is
    nobody's own (a set-user-ID program: `own_uid`)."""
    uid, data = own_uid(pid, Path(proc)), read_environ(pid, Path(proc))
    if uid is None or data is None:
        return None
    lease = environ_value(data, LEASE_KEY)
    if not lease:
        return None
    return Inherited(uid, lease, environ_value(data, ON_REVOKE_KEY) == "terminate")


def belongs(found: Inherited | None, lease: Lease | None) -> bool:
    """Whether a process whose environment says `found` may join `lease`: its owner's."""
    return found is not None and lease is not None and found.uid == lease.owner_uid


def inheritors(
    table: ProcessTable, leases: Mapping[str, Lease], covered: Iterable[int], proc: str = "/proc"
) -> list[tuple[str, Member, bool]]:
    """The processes of `table` outside every family whose environment names one of
    `leases` of their own owner, started after its holder: (lease id, member, terminate)."""
    if not leases:
        return []
    owners = {lease.owner_uid for lease in leases.values()}
    earliest = min((lease.pid_start_time or 0) for lease in leases.values())
    known = set(covered)
    found = []
    for pid, (_ppid, start) in table.items():
        if pid in known or start < earliest or _owner(pid, proc) not in owners:
            continue
        got = inherited(pid, proc)
        lease = leases.get(got.lease_id) if got is not None else None
        after_holder = lease is not None and start >= (lease.pid_start_time or 0)
        if got is not None and lease is not None and belongs(got, lease) and after_holder:
            found.append((got.lease_id, (pid, start), got.terminate))
    return found


def _owner(pid: int, proc: str) -> int | None:
    try:
        return os.stat(f"{proc}/{pid}").st_uid
    except OSError:
        return None
