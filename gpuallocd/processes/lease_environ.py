"""Living processes that carry a lease id in their environment, read from /proc.

`gpu_lease` and `gpuallocctl run` export `GPUALLOCD_LEASE_ID` to the job and its children.
After the ledger is lost, a recovery reads it, through the trust rule's reader
(`Decision.REBUILT`, host/trust.py), and lets it only choose among the leases its records
know, for the same user (daemon/ledger_care/machine.py): /proc/PID/environ is the
process's own memory, which it may rewrite after it started, and may give a name twice
with two values (a process that does carries nothing here). `CUDA_VISIBLE_DEVICES` is not
read: it is never evidence of a GPU. The uid is the kernel's, and only a process that is
its user's own (real, effective and saved uids one: not a set-user-ID program) carries
anything. Reading another user's environment needs root (or CAP_SYS_PTRACE); an unreadable
one is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpulease.lease_id import LEASE_ID, LEASE_ID_VARIABLE

from gpuallocd.host.proc import PROC, own_uid, process_start_time
from gpuallocd.host.trust import Decision, Written, environment

__all__ = ["LEASE_KEY", "LeaseCarrier", "lease_carriers"]

LEASE_KEY = LEASE_ID_VARIABLE.encode()


@dataclass(frozen=True, slots=True)
class LeaseCarrier:
    """One process carrying a lease id: its pid, start time (clock ticks since boot), uid,
    and what its environment says, every occurrence of the id agreeing."""

    pid: int
    start_time: int
    uid: int
    claims: tuple[Written, ...]

    @property
    def lease_id(self) -> str:
        """The id its claims name (they agree: `lease_carriers` keeps no other)."""
        return self.claims[0].value


def _agreed(claims: tuple[Written, ...]) -> str | None:
    """The one lease id every claim names, where it is one as the daemon makes them."""
    values = {claim.value for claim in claims}
    found = values.pop() if len(values) == 1 else None
    return found if found is not None and LEASE_ID.fullmatch(found) else None


def _carrier(pid: int, proc: Path) -> LeaseCarrier | None:
    start = process_start_time(pid, proc)
    found = environment(Decision.REBUILT, pid, LEASE_KEY, proc=proc)
    if start is None or found is None or _agreed(found[LEASE_KEY]) is None:
        return None
    uid = own_uid(pid, proc)
    if uid is None or process_start_time(pid, proc) != start:
        return None  # nobody's own, gone, or its pid another process's since the first read
    return LeaseCarrier(pid, start, uid, found[LEASE_KEY])


def lease_carriers(proc: Path = PROC) -> list[LeaseCarrier]:
    """Every living process whose environment names a lease, by pid."""
    found = []
    for entry in sorted(proc.iterdir(), key=lambda p: (len(p.name), p.name)):
        if entry.name.isdigit() and (carrier := _carrier(int(entry.name), proc)):
            found.append(carrier)
    return found
