"""What the machine shows a recovery, each fact with who gave it.

Given by the kernel and the driver, and believed: which processes run on which GPU unit
(NVML), each one's owner (its effective uid) and start time, read through a pidfd so a
recycled pid is never taken for the process NVML listed, and its parent chain (/proc).

Written by the process's user, and believed only to choose (`Decision.REBUILT`,
host/trust.py): the lease id in its environment (`GPUALLOCD_LEASE_ID`). A carried id
counts only where the records know that lease and it is the same user's as the process's;
any other (an id no record knows, another user's id, read from memory the process may have
rewritten since it started) is set aside, and the recovery says so. `CUDA_VISIBLE_DEVICES`
is never evidence of a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpulease.lease_id import LEASE_ID_VARIABLE

from gpuallocd.allocator.unleased.adoption import unit_of
from gpuallocd.daemon.ledger_care.records import Recorded, Records, user_name
from gpuallocd.enforcement.proc_facts import owner_and_start
from gpuallocd.host.proc import ProcessTable, read_process_table
from gpuallocd.host.trust import Decision, choose
from gpuallocd.model import Gpu, LiveState, Topology
from gpuallocd.processes.lease_environ import LeaseCarrier

__all__ = ["Machine", "OnUnit", "read_machine"]

MAX_SET_ASIDE_LINES = 20


@dataclass(frozen=True)
class OnUnit:
    """A process NVML shows on a GPU unit, as the kernel knows it."""

    pid: int
    start: int
    uid: int
    unit: str  # the unit's UUID: a whole GPU's, or a MIG instance's
    gpu: Gpu
    line: frozenset[tuple[int, int]]  # itself and its ancestors, each (pid, start time)


@dataclass
class Machine:
    """The processes on GPU units, and the carried lease ids the records back."""

    on_units: list[OnUnit]
    believed: dict[str, list[LeaseCarrier]]  # lease id -> its owner's processes carrying it
    set_aside: list[str] = field(default_factory=list)  # lines for the carriers not believed

    def processes_of(self, lease: Recorded) -> list[OnUnit]:
        """The processes on units that are `lease`'s by the kernel's word: its owner's, and
        its bound process or a process carrying its id, or a descendant of one of those."""
        marks = {(c.pid, c.start_time) for c in self.believed.get(lease.id, ())}
        if lease.holder is not None:
            marks.add(lease.holder)
        return [p for p in self.on_units if p.uid == lease.owner_uid and p.line & marks]

    def users_of(self, unit: str) -> list[OnUnit]:
        return [p for p in self.on_units if p.unit == unit]

    def runs(self, lease: Recorded) -> tuple[int, int] | None:
        """The process `lease` runs under now: its bound process if it lives, else the first
        started of its owner's processes carrying its id; None when none runs."""
        if lease.holder is not None and _lives(*lease.holder):
            return lease.holder
        carriers = sorted(self.believed.get(lease.id, ()), key=lambda c: c.start_time)
        return (carriers[0].pid, carriers[0].start_time) if carriers else None


def _lives(pid: int, start: int) -> bool:
    found = owner_and_start(pid)
    return found is not None and found[1] == start


def _line(pid: int, start: int, table: ProcessTable) -> frozenset[tuple[int, int]]:
    line = {(pid, start)}
    seen = {pid}
    parent = table.get(pid, (0, 0))[0]
    while parent > 0 and parent not in seen and parent in table:
        seen.add(parent)
        line.add((parent, table[parent][1]))
        parent = table[parent][0]
    return frozenset(line)


def _on_units(topology: Topology, live: Mapping[str, LiveState]) -> list[OnUnit]:
    table = read_process_table()
    found = []
    for gpu in topology.gpus:
        state = live.get(gpu.uuid)
        for process in state.processes if state is not None else ():
            pinned = owner_and_start(process.pid)
            if pinned is None or process.uid not in (None, pinned[0]):
                continue  # gone since the sample, or its pid is another user's process now
            uid, start = pinned
            unit = unit_of(gpu, process)
            found.append(
                OnUnit(process.pid, start, uid, unit, gpu, _line(process.pid, start, table))
            )
    return found


def _judge_carriers(
    carriers: Iterable[LeaseCarrier], records: Records
) -> tuple[dict[str, list[LeaseCarrier]], list[str]]:
    believed: dict[str, list[LeaseCarrier]] = {}
    aside: dict[tuple[int, str], tuple[LeaseCarrier, str]] = {}
    for carrier in carriers:
        lease = records.of(carrier.lease_id)
        theirs = {lease.id: lease} if lease is not None and lease.owner_uid == carrier.uid else {}
        if choose(Decision.REBUILT, carrier.claims, theirs) is not None:
            believed.setdefault(carrier.lease_id, []).append(carrier)
            continue
        why = "no record knows that lease" if lease is None else f"that lease is {lease.owner}'s"
        aside.setdefault((carrier.uid, carrier.lease_id), (carrier, why))
    lines = [
        f"set aside: {user_name(c.uid)}'s pid {c.pid} carries {LEASE_ID_VARIABLE}={c.lease_id}, "
        f"but {why}: it gives nothing"
        for c, why in sorted(aside.values(), key=lambda v: (v[0].uid, v[0].lease_id))
    ]
    if len(lines) > MAX_SET_ASIDE_LINES:
        more = len(lines) - MAX_SET_ASIDE_LINES
        lines = [*lines[:MAX_SET_ASIDE_LINES], f"set aside: {more} more carried lease id(s)"]
    return believed, lines


def read_machine(
    topology: Topology,
    live: Mapping[str, LiveState],
    carriers: Sequence[LeaseCarrier],
    records: Records,
) -> Machine:
    """What the machine shows now, judged against the records."""
    believed, lines = _judge_carriers(carriers, records)
    return Machine(_on_units(topology, live), believed, lines)
