"""The processes a bound lease covers: its holder and every process started under it.

A lease taken by `gpuallocctl run` or `gpu_lease` must follow the work, not the wrapper: a
worker forked by the holder keeps the GPUs it was given, so the lease must last until the
last such process has exited. A member is a pid *and* its start time, so a reused pid is
never mistaken for one, and it stays a member after its parent exits and it is handed to
init: the family survives the holder.

Two ways keep a family current. With the kernel's process events (`connector.py`) a fork by
a member adds the child when it happens (`forked`), whatever its parent does next, and an
exit removes it (`exited`). Without them, or after events were lost, a scan of /proc adds
every process whose parent is a living member and drops members that are gone (`scan`); a
process whose whole chain of parents up to a member exits between two scans is not seen by
its parents, and is found by the lease id it inherited in its environment (`inherited.py`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from gpuallocd.host.proc import ProcessTable
from gpuallocd.model import Lease

__all__ = ["UNKNOWN_START", "Member", "ProcessFamilies"]

Member = tuple[int, int]  # pid, start time in clock ticks since boot
UNKNOWN_START = -1  # a child gone before its start time could be read: never signalled


class ProcessFamilies:
    """For each bound lease, the set of processes it covers, and which leases cover a pid."""

    def __init__(self) -> None:
        self._families: dict[str, set[Member]] = {}
        self._leases_of: dict[int, set[str]] = defaultdict(set)

    def track(self, lease: Lease, descendants: Iterable[Member] = ()) -> None:
        """Start a family with the lease's holder and the processes already started under it
        (nothing for a detached lease)."""
        if lease.bound and lease.pid is not None and lease.pid_start_time is not None:
            self._families.setdefault(lease.id, set())
            for member in ((lease.pid, lease.pid_start_time), *descendants):
                self._add(lease.id, member)

    def retain(self, lease_ids: Iterable[str]) -> None:
        keep = set(lease_ids)
        for lease_id in [i for i in self._families if i not in keep]:
            for member in list(self._families[lease_id]):
                self._remove(lease_id, member)
            del self._families[lease_id]

    def forget(self, lease_id: str) -> None:
        """Stop following one lease's family (something else follows it now)."""
        self.retain(i for i in self._families if i != lease_id)

    def __bool__(self) -> bool:
        return bool(self._families)

    def members(self, lease_id: str) -> list[Member]:
        return sorted(self._families.get(lease_id, ()))

    def attach(self, lease_id: str, member: Member) -> bool:
        """Add a process found by other means (its environment) to a lease followed here."""
        if lease_id not in self._families or member in self._families[lease_id]:
            return False
        self._add(lease_id, member)
        return True

    def add(self, lease_id: str, members: Iterable[Member]) -> None:
        """Add processes the lease took in after its grant (its work found when its holder
        exited, or a process that joined it): a family of their own where it had none."""
        self._families.setdefault(lease_id, set())
        for member in members:
            self._add(lease_id, member)

    def covered(self) -> set[int]:
        """Every pid some family holds."""
        return set(self._leases_of)

    def covers(self, pid: int) -> bool:
        """Whether some family holds a process with this pid."""
        return pid in self._leases_of

    def forked(self, parent: int, child: Member) -> list[str]:
        """`parent` forked `child`: each lease covering the parent now covers the child too.
        The leases that did."""
        lease_ids = sorted(self._leases_of.get(parent, ()))
        for lease_id in lease_ids:
            self._add(lease_id, child)
        return lease_ids

    def exited(self, pid: int) -> list[str]:
        """Process `pid` exited: it leaves every family. The leases left with no process."""
        emptied = []
        for lease_id in sorted(self._leases_of.get(pid, ())):
            family = self._families[lease_id]
            for member in [m for m in family if m[0] == pid]:
                self._remove(lease_id, member)
            if not family:
                emptied.append(lease_id)
        return emptied

    def scan(self, table: ProcessTable) -> list[str]:
        """Update every family from `table`; the leases whose processes have all exited."""
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, _start) in table.items():
            children[ppid].append(pid)
        emptied = []
        for lease_id, family in self._families.items():
            alive = {m for m in family if table.get(m[0], (0, -2))[1] == m[1]}
            for member in family - alive:
                self._remove(lease_id, member)
            for member in _with_descendants(alive, children, table) - alive:
                self._add(lease_id, member)
            if not family:
                emptied.append(lease_id)
        return emptied

    def _add(self, lease_id: str, member: Member) -> None:
        self._families[lease_id].add(member)
        self._leases_of[member[0]].add(lease_id)

    def _remove(self, lease_id: str, member: Member) -> None:
        family = self._families[lease_id]
        family.discard(member)
        leases = self._leases_of.get(member[0])
        if leases is not None and not any(m[0] == member[0] for m in family):
            leases.discard(lease_id)
            if not leases:
                del self._leases_of[member[0]]


def _with_descendants(
    roots: set[Member], children: dict[int, list[int]], table: ProcessTable
) -> set[Member]:
    found = set(roots)
    pending = [pid for pid, _start in roots]
    while pending:
        for child in children.get(pending.pop(), ()):
            member = (child, table[child][1])
            if member not in found:
                found.add(member)
                pending.append(child)
    return found
