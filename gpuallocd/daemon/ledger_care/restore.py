"""Leases the records show still held, yet holding no unit: each judged, under its own id.

A lease whose row survived while its units' rows were lost, or whose row was lost while
its other rows show it held, comes back under its own id (its holder keeps renewing it,
`gpuallocctl run` keeps running its command), owned by whom the records say, never by
whom a process says. Its units, in order of proof:

1. those the records name (the backup's rows, the units' index, the power caps' put-backs
   it wrote as the GPU's first capped lease since its limit was last its own):
   where one of them is now in another active lease, the lease had ended (a unit is never
   in two), and it is ended here, never listed as lost;
2. else those NVML shows its processes on (its owner's, and its bound process or a process
   carrying its id, or a descendant: machine.py), where no other user's process runs and
   no lease holds them, each within the owner's limits as a grant would be;
3. else none: a lease whose process still runs is kept, holding nothing, so that its job is
   never stopped under it; one with nothing running is lost, and said so.

A lease whose units' rows say they were given back (or that the units' table, read whole,
no longer holds) had ended: it is ended here. Each line names the owner.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gpuallocd.allocator.unleased.adoption import unit_lease
from gpuallocd.daemon.ledger_care.machine import Machine
from gpuallocd.daemon.ledger_care.records import Held, Recorded, Records
from gpuallocd.ledger.salvage import end_lease, restore_lease
from gpuallocd.model import Lease, LeasedGpu, Topology, UnitKind

__all__ = ["Restored", "restore"]

# Are these units within the owner's limits, as a grant of them would be? None if so, else
# why not.
WithinLimits = Callable[[Recorded, Sequence[LeasedGpu]], str | None]
RECOVERED_POLICY = "recovered"


@dataclass
class Restored:
    """What `restore` did, one line each."""

    rebuilt: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    unsure: dict[str, list[str]] = field(default_factory=dict)  # owner -> lease ids


def _gpu_names(units: list[LeasedGpu]) -> str:
    return ", ".join(f"GPU {u.index} ({u.uuid})" for u in units)


class _Judge:
    def __init__(
        self,
        conn: sqlite3.Connection,
        records: Records,
        machine: Machine,
        topology: Topology,
        within_limits: WithinLimits,
        now: float,
        hold_seconds: float,
    ) -> None:
        self.conn = conn
        self.records = records
        self.machine = machine
        self.topology = topology
        self.within_limits = within_limits
        self.now = now
        self.hold = hold_seconds
        self.taken = dict(records.active_units)  # unit -> the active lease and its owner
        self.done = Restored()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def units(self, uuids: set[str]) -> list[LeasedGpu]:
        """The units these UUIDs name on this machine, as a lease holds them; a unit of a GPU
        that shares its memory is left out (the index cannot tell a share from the GPU)."""
        found = []
        for uuid in sorted(uuids):
            unit = unit_lease(self.topology, uuid)
            if unit is not None and unit.gpu_uuid not in self.records.shared_gpus:
                found.append(unit)
        return sorted(found, key=lambda u: (u.index, u.uuid))

    def judge(self, lease: Recorded) -> None:
        if lease.held is Held.UNKNOWN:
            self.done.unsure.setdefault(lease.owner, []).append(lease.id)
            return
        if lease.held is not Held.ACTIVE:
            return  # it had ended: its rows say so; nothing is lost
        if lease.released:
            self.end(lease, "its units' rows say it gave its GPUs back")
            return
        elsewhere = sorted(u for u in lease.named if u in self.taken)
        if elsewhere:
            newer, owner = self.taken[elsewhere[0]]
            self.end(lease, f"its GPU {elsewhere[0]} is in a newer lease ({newer} of {owner})")
            return
        recorded = self.units(set(lease.named))
        if recorded:
            self.put_back(lease, recorded, "the ledger's records name them")
            return
        found, refused = self.on_the_driver(lease)
        if found:
            why = "NVML shows its processes on them" + (f"; {refused}" if refused else "")
            self.put_back(lease, found, why)
        else:
            self.without_units(lease, refused)

    def on_the_driver(self, lease: Recorded) -> tuple[list[LeasedGpu], str | None]:
        """The units NVML shows `lease`'s processes on, where no other user's process runs
        and no lease holds them, within the owner's limits; and why one was refused."""
        mine = {p.unit for p in self.machine.processes_of(lease)}
        found: list[LeasedGpu] = []
        refused = None
        for unit in self.units(mine):
            others = [p for p in self.machine.users_of(unit.uuid) if p.uid != lease.owner_uid]
            if others or self.is_taken(unit):
                continue
            why = self.within_limits(lease, [*found, unit])
            if why is not None:
                refused = refused or f"GPU {unit.index} left out: {why}"
                continue
            found.append(unit)
        return found, refused

    def is_taken(self, unit: LeasedGpu) -> bool:
        """Whether an active lease holds `unit`, or the whole GPU it is part of, or (for a
        whole GPU) a part of it."""
        instances = self.topology.instances()
        held_gpus = {instances[u][0].uuid if u in instances else u for u in self.taken}
        if unit.kind is UnitKind.WHOLE:
            return unit.uuid in held_gpus
        return unit.uuid in self.taken or unit.gpu_uuid in self.taken

    def put_back(self, lease: Recorded, units: list[LeasedGpu], why: str) -> None:
        runs = self.machine.runs(lease)
        restored = self.lease(lease, tuple(units), runs)
        detail = f"recovered after ledger damage under its own id: {why}"
        try:
            with self.transaction():
                restore_lease(self.conn, restored, row_kept=lease.row, detail=detail, at=self.now)
        except sqlite3.IntegrityError as exc:  # a part of its GPU, or the whole, is leased
            self.end(lease, f"a GPU of it is in another active lease ({exc})")
            return
        for unit in units:
            self.taken[unit.uuid] = (lease.id, lease.owner)
        self.done.rebuilt.append(
            f"rebuilt: lease {lease.id} of {lease.owner} on {_gpu_names(units)}: {why}"
        )

    def without_units(self, lease: Recorded, refused: str | None) -> None:
        runs = self.machine.runs(lease)
        unknown = "which GPUs it held is unknown (their rows were unreadable"
        unknown += f"; {refused})" if refused else ", and NVML shows none of its processes)"
        if runs is None:
            if lease.row:
                with self.transaction():
                    end_lease(self.conn, lease.id, self.now, f"recovery: {unknown}")
            self.done.lost.append(f"lost: lease {lease.id} of {lease.owner}: {unknown}")
            return
        if not lease.row:
            detail = "recovered after ledger damage under its own id, holding no GPU"
            with self.transaction():
                restore_lease(
                    self.conn,
                    self.lease(lease, (), runs),
                    row_kept=False,
                    detail=detail,
                    at=self.now,
                )
        self.done.rebuilt.append(
            f"kept: lease {lease.id} of {lease.owner}, whose pid {runs[0]} runs: {unknown}; "
            "it holds no GPU now, so its job is not stopped; tell the owner"
        )

    def end(self, lease: Recorded, why: str) -> None:
        if lease.row:
            with self.transaction():
                end_lease(self.conn, lease.id, self.now, f"recovery: it had ended ({why})")
        self.done.ended.append(f"ended: lease {lease.id} of {lease.owner}: {why}")

    def lease(
        self, found: Recorded, units: tuple[LeasedGpu, ...], runs: tuple[int, int] | None
    ) -> Lease:
        """The lease to write back (its row's fields matter only where its row was lost)."""
        return Lease(
            id=found.id,
            gpus=units,
            owner_uid=found.owner_uid if found.owner_uid is not None else 0,
            owner_name=found.owner,
            pid=runs[0] if runs else None,
            label="recovered after ledger damage",
            policy=RECOVERED_POLICY,
            created_at=found.created_at if found.created_at is not None else self.now,
            expires_at=self.now + self.hold,
            bound=runs is not None,
            pid_start_time=runs[1] if runs else None,
        )


def restore(
    path: Path,
    records: Records,
    machine: Machine,
    topology: Topology,
    within_limits: WithinLimits,
    *,
    now: float,
    hold_seconds: float,
) -> Restored:
    """Judge each lease the records show held without units, in the ledger at `path`. Each
    lease's change is one transaction of its own, written once it is decided (deciding reads
    the ledger, through `within_limits`, as it stands after the last)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    judge = _Judge(conn, records, machine, topology, within_limits, now, hold_seconds)
    try:
        # Newest first: of two leases the records give the same unit, the older had ended.
        for lease in sorted(records.to_judge, key=lambda r: (-(r.created_at or now), r.id)):
            if lease.owner_uid is None and lease.held is Held.ACTIVE:
                judge.done.lost.append(
                    f"lost: lease {lease.id} of an unknown user: no readable record names its owner"
                )
                continue
            judge.judge(lease)
    finally:
        conn.close()
    return judge.done
