"""The lease a process's work inherits through its environment, for when its ancestry was lost.

`gpu_lease` (and so `gpuallocctl run`) puts `GPUALLOCD_LEASE_ID` in the environment of what
it starts; every process started below inherits it. Where the daemon cannot tell a
process's family by its parents (events lost to an overrun, a restart after the holder died, a
`clone(CLONE_PARENT)` child whose parent is not a member), it reads them from
/proc/PID/environ: the environment the process was started with (what it sets later is not
there). A user can write anything there, so what it says only chooses among the leases of
the process's owner (its effective uid), started before it (`Decision.INHERITED`,
host/trust.py): nobody can hang their work on another user's lease, nor have another user's
revoke stop it. An id written twice with two values chooses nothing. Whether a revoke stops
the work is the ledger's word (the lease's `on_revoke`), never the environment's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpulease.lease_id import LEASE_ID_VARIABLE

from gpuallocd.host.proc import ProcessTable, own_uid, process_owner
from gpuallocd.host.trust import Decision, Written, choose, environment
from gpuallocd.model import Lease
from gpuallocd.processes.families import Member

__all__ = ["Inherited", "belongs", "inherited", "inheritors"]

LEASE_KEY = LEASE_ID_VARIABLE.encode()


@dataclass(frozen=True, slots=True)
class Inherited:
    """What a process's environment says of its lease, and whose process it is."""

    uid: int
    claims: tuple[Written, ...]  # every GPUALLOCD_LEASE_ID it holds

    @property
    def lease_id(self) -> str:
        """The lease its claims name, where they agree ("" where they do not)."""
        values = {claim.value for claim in self.claims}
        return values.pop() if len(values) == 1 else ""


def inherited(pid: int, proc: str = "/proc") -> Inherited | None:
    """The lease in `pid`'s environment; None without one, when it cannot be read (another
    user's environment takes CAP_SYS_PTRACE, which the unit grants), or when the process is
    nobody's own (a set-user-ID program: `own_uid`)."""
    uid = own_uid(pid, Path(proc))
    found = environment(Decision.INHERITED, pid, LEASE_KEY, proc=Path(proc))
    if uid is None or found is None or not found[LEASE_KEY]:
        return None
    return Inherited(uid, found[LEASE_KEY])


def belongs(found: Inherited | None, lease: Lease | None) -> bool:
    """Whether a process whose environment says `found` may join `lease`: what it says
    chooses among its owner's leases only."""
    if found is None or lease is None or found.uid != lease.owner_uid:
        return False
    return choose(Decision.INHERITED, found.claims, {lease.id: lease}) is lease


def inheritors(
    table: ProcessTable, leases: Mapping[str, Lease], covered: Iterable[int], proc: str = "/proc"
) -> list[tuple[str, Member]]:
    """The processes of `table` outside every family whose environment names one of
    `leases` of their own owner, started after its holder: (lease id, member)."""
    if not leases:
        return []
    by_owner: dict[int, dict[str, Lease]] = {}
    for lease_id, lease in leases.items():
        by_owner.setdefault(lease.owner_uid, {})[lease_id] = lease
    earliest = min((lease.pid_start_time or 0) for lease in leases.values())
    known = set(covered)
    found = []
    for pid, (_ppid, start) in table.items():
        if pid in known or start < earliest or process_owner(pid, Path(proc)) not in by_owner:
            continue
        got = inherited(pid, proc)
        if got is None:
            continue
        theirs = by_owner.get(got.uid, {})
        before = {i: lease for i, lease in theirs.items() if start >= (lease.pid_start_time or 0)}
        chosen = choose(Decision.INHERITED, got.claims, before)
        if chosen is not None:
            found.append((chosen.id, (pid, start)))
    return found
