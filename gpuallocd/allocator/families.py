"""The processes a bound lease covers: its holder and every process started under it.

A lease taken by `gpuallocctl run` or `gpu_lease` must follow the work, not the wrapper: a
worker forked by the holder keeps the GPUs it was given, so the lease must last until the
last such process has exited. Where there is no cgroup per lease to ask (no systemd with
cgroup v2), the family is learnt from /proc: each scan adds every process whose parent is a
living member, and drops members that are gone (a member is a pid *and* its start time, so a
reused pid is never mistaken for one). A member is remembered even after its parent exits
and it is handed to init, so the family survives the holder. What a scan cannot see: a
process that is started and whose whole chain of parents up to a member exits between two
scans (one second apart, and at each renewal). `gpuallocctl run` closes that gap for its own
command: it is the subreaper of the command's tree, so orphans come back to it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from gpuallocd.model import Lease

__all__ = ["Member", "ProcessFamilies", "ProcessTable", "read_process_table"]

Member = tuple[int, int]  # pid, start time in clock ticks since boot
ProcessTable = dict[int, tuple[int, int]]  # pid -> (parent pid, start time)
_PROC = Path("/proc")


def _parse_stat(text: str) -> tuple[int, int] | None:
    fields = text[text.rindex(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None  # a zombie has exited already
    return int(fields[1]), int(fields[19])  # ppid (field 4), starttime (field 22)


def read_process_table(proc: Path = _PROC) -> ProcessTable:
    """Every living process: its parent and its start time, read from /proc."""
    table: ProcessTable = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parsed = _parse_stat((entry / "stat").read_text())
        except (OSError, ValueError):
            continue  # gone while we looked
        if parsed is not None:
            table[int(entry.name)] = parsed
    return table


class ProcessFamilies:
    """For each bound lease, the set of processes it covers."""

    def __init__(self) -> None:
        self._families: dict[str, set[Member]] = {}

    def track(self, lease: Lease) -> None:
        """Start a family with the lease's holder (nothing for a detached lease)."""
        if lease.bound and lease.pid is not None and lease.pid_start_time is not None:
            self._families.setdefault(lease.id, set()).add((lease.pid, lease.pid_start_time))

    def retain(self, lease_ids: Iterable[str]) -> None:
        keep = set(lease_ids)
        for lease_id in list(self._families):
            if lease_id not in keep:
                del self._families[lease_id]

    def __bool__(self) -> bool:
        return bool(self._families)

    def members(self, lease_id: str) -> list[Member]:
        return sorted(self._families.get(lease_id, ()))

    def scan(self, table: ProcessTable) -> list[str]:
        """Update every family from `table`; the leases whose processes have all exited."""
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (ppid, _start) in table.items():
            children[ppid].append(pid)
        emptied = []
        for lease_id, family in self._families.items():
            alive = {m for m in family if table.get(m[0], (0, -1))[1] == m[1]}
            family.clear()
            family.update(_with_descendants(alive, children, table))
            if not family:
                emptied.append(lease_id)
        return emptied


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
