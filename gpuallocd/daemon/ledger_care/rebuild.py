"""Building the recovered ledger: salvaged rows, else a backup under them, then what the
machine itself proves.

1. Rows: what SQLite could read of the damaged ledger (ledger/salvage.py). Where every table
   read whole, that is the ledger. Otherwise the newest backup that passes its check is the
   base and the salvaged rows are laid over it (newer wins for leases), then made to agree.
2. The machine: every living process whose environment carries a lease id
   (`GPUALLOCD_LEASE_ID`) that is not active in the ledger gets that lease back, under its id
   where the ledger never heard of it, on the GPUs its `CUDA_VISIBLE_DEVICES` names or NVML
   shows it on; then every GPU NVML shows in use that no active lease explains is held by a
   lease bound to one of its processes (label `recovered: in use by pid N`). These leases are
   bound: each ends when its process exits, and its GPUs are free again then, not before.
   The ledger's unique index refuses any double booking, here as in service.
3. What is lost (leases named in salvaged rows whose own record is gone; leases ended because
   their GPUs were in a newer lease; the backup's age) is returned for the log and recorded
   as an admin action (`recover`) in the ledger.
"""

from __future__ import annotations

import os
import pwd
import shutil
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuallocd.errors import GpuBusy, LedgerError
from gpuallocd.host.proc import process_owner, process_start_time
from gpuallocd.ledger import Ledger
from gpuallocd.ledger.backups import BackupInfo
from gpuallocd.ledger.salvage import SalvageReport, lay_over, normalise
from gpuallocd.model import Lease, LeasedGpu, LeaseEvent, LiveState, Topology
from gpuallocd.processes.lease_environ import LeaseCarrier

__all__ = ["Evidence", "Outcome", "rebuild"]

MAX_SUMMARY = 8000


@dataclass(frozen=True)
class Evidence:
    """What the machine shows now: its GPUs, their processes, and the lease ids carried."""

    topology: Topology
    live: Mapping[str, LiveState]
    carriers: Sequence[LeaseCarrier]
    hold_seconds: float  # how long a recovered lease lasts, unless its process ends first
    damaged_at: float = float("inf")  # the damaged ledger's last write (its files' mtime)


@dataclass
class Outcome:
    """What the recovery did and found."""

    source: str
    rebuilt: list[str] = field(default_factory=list)  # leases back from their processes
    held: list[str] = field(default_factory=list)  # GPUs held for unexplained processes
    lost: list[str] = field(default_factory=list)
    active: int = 0

    def lines(self) -> list[str]:
        return [f"source: {self.source}", *self.rebuilt, *self.held, *self.lost]


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _base(new: Path, salvage: SalvageReport, backup: BackupInfo | None, now: float) -> str:
    """Lay the rows down: salvage alone, or a backup with the salvage over it."""
    if backup is not None and not salvage.complete:
        shutil.copyfile(backup.path, new)
        os.chmod(new, 0o600)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(backup.taken_at))
        source = f"backup {backup.path.name} (taken {stamp}) with what the damaged file held"
    elif salvage.complete:
        source = "every row of the damaged ledger (SQLite read it all)"
    else:
        source = "what SQLite could read of the damaged ledger (no good backup)"
    Ledger(new).close()  # the current schema (a backup of an older one is migrated)
    return source


def _lay_rows(new: Path, salvage: SalvageReport, now: float) -> tuple[int, list[str]]:
    conn = sqlite3.connect(str(new), isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        refused = lay_over(conn, salvage)
        orphans = normalise(conn, now)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return refused, orphans


def _physical(topology: Topology) -> dict[str, str]:
    """Each unit's UUID (a GPU's, a MIG instance's) to its GPU's: a unit is held whole."""
    found = {g.uuid: g.uuid for g in topology.gpus}
    found.update({m.uuid: g.uuid for g in topology.gpus for m in g.mig_devices})
    return found


def _named_gpus(topology: Topology, devices: Sequence[str]) -> set[str]:
    """The GPUs among `devices` (UUIDs, or indices as CUDA_VISIBLE_DEVICES gives)."""
    by_uuid = _physical(topology)
    by_index = {str(g.index): g.uuid for g in topology.gpus}
    return {found for d in devices if (found := by_uuid.get(d) or by_index.get(d))}


def _gpus_of_pids(topology: Topology, live: Mapping[str, LiveState], pids: set[int]) -> set[str]:
    physical = _physical(topology)
    return {
        physical[uuid]
        for uuid, state in live.items()
        if uuid in physical and any(p.pid in pids for p in state.processes)
    }


def _held(ledger: Ledger) -> set[str]:
    return {g.gpu_uuid for lease in ledger.active_leases() for g in lease.gpus}


def _lease(
    lease_id: str,
    gpus: set[str],
    topology: Topology,
    carrier: tuple[int, int, int],
    label: str,
    now: float,
    hold: float,
) -> Lease:
    pid, start, uid = carrier
    index = {g.uuid: g.index for g in topology.gpus}
    units = tuple(LeasedGpu(uuid, index[uuid]) for uuid in sorted(gpus, key=index.__getitem__))
    return Lease(
        lease_id,
        units,
        uid,
        _user(uid),
        pid,
        label,
        "recovered",
        now,
        now + hold,
        bound=True,
        pid_start_time=start,
    )


def _grant(ledger: Ledger, lease: Lease, detail: str, now: float) -> bool:
    try:
        ledger.grant(lease, 0)
    except GpuBusy:
        return False
    ledger.note(lease.id, LeaseEvent.ADOPTED, now, detail)
    return True


def _rebuild_carried(ledger: Ledger, evidence: Evidence, now: float, outcome: Outcome) -> None:
    """Leases whose processes carry their id, back where the ledger lacks them.

    The GPUs are those NVML shows the lease's processes on, and those its environment names
    if its first process started before the damaged ledger's last write (a process started
    later cannot have been granted anything by it; its environment proves nothing). Only the
    processes of the first one's user count."""
    groups: dict[str, list[LeaseCarrier]] = {}
    for carrier in evidence.carriers:
        groups.setdefault(carrier.lease_id, []).append(carrier)
    active = {lease.id for lease in ledger.active_leases()}
    for lease_id, members in sorted(groups.items()):
        if lease_id in active:
            continue
        holder = min(members, key=lambda c: c.start_time)
        pids = {c.pid for c in members if c.uid == holder.uid}
        gpus = _gpus_of_pids(evidence.topology, evidence.live, pids)
        if holder.started_at < evidence.damaged_at:  # it ran while the daemon could grant it
            gpus |= _named_gpus(evidence.topology, holder.devices)
        gpus -= _held(ledger)
        if not gpus:
            outcome.lost.append(f"lost: lease {lease_id} (pid {holder.pid}), no free GPU of it")
            continue
        known = ledger.lease(lease_id) is not None
        new_id = os.urandom(6).hex() if known else lease_id
        label = f"recovered: in use by pid {holder.pid}" + (f" (lease {lease_id})" if known else "")
        lease = _lease(
            new_id,
            gpus,
            evidence.topology,
            (holder.pid, holder.start_time, holder.uid),
            label,
            now,
            evidence.hold_seconds,
        )
        detail = f"recovered after ledger damage: pid {holder.pid} carries GPUALLOCD_LEASE_ID"
        if _grant(ledger, lease, detail, now):
            outcome.rebuilt.append(f"rebuilt: lease {new_id} on {', '.join(lease.uuids)}")


def _hold_unexplained(ledger: Ledger, evidence: Evidence, now: float, outcome: Outcome) -> None:
    """A GPU NVML shows in use that no active lease explains: held for its process."""
    physical = _physical(evidence.topology)
    for unit, state in sorted(evidence.live.items()):
        uuid = physical.get(unit)
        if uuid is None or uuid in _held(ledger) or not state.processes:
            continue
        process = min(state.processes, key=lambda p: p.pid)
        start = process_start_time(process.pid)
        if start is None:
            continue  # gone already
        uid = process.uid if process.uid is not None else _uid_of(process.pid)
        label = f"recovered: in use by pid {process.pid}"
        lease = _lease(
            os.urandom(6).hex(),
            {uuid},
            evidence.topology,
            (process.pid, start, uid),
            label,
            now,
            evidence.hold_seconds,
        )
        if _grant(ledger, lease, f"{label}, which no recovered lease explains", now):
            outcome.held.append(f"held: GPU {uuid} for pid {process.pid} (lease {lease.id})")


def _uid_of(pid: int) -> int:
    found = process_owner(pid)
    return 0 if found is None else found


def _lost_in_rows(ledger: Ledger, salvage: SalvageReport) -> list[str]:
    named: set[str] = set()
    for table in ("lease_gpus", "history", "lease_requests"):
        columns, rows = salvage.rows.get(table, ([], []))
        if "lease_id" in columns:
            named |= {str(r[columns.index("lease_id")]) for r in rows}
    return [
        f"lost: lease {i} (its record was unreadable)"
        for i in sorted(named)
        if ledger.lease(i) is None
    ]


def rebuild(
    new: Path,
    salvage: SalvageReport,
    backup: BackupInfo | None,
    evidence: Evidence,
    now: float,
) -> Outcome:
    """Build the recovered ledger at `new` (a path of the recovery's own)."""
    outcome = Outcome(_base(new, salvage, backup, now))
    refused, orphans = _lay_rows(new, salvage, now)
    outcome.lost += [f"lost: lease {i} (its GPUs are in a newer lease)" for i in orphans]
    if refused:
        outcome.lost.append(f"lost: {refused} salvaged row(s) that broke the ledger's rules")
    for table, error in sorted(salvage.damaged_tables.items()):
        outcome.lost.append(f"damaged: table {table} ({error}); its readable rows were kept")
    if backup is not None and not salvage.complete:
        outcome.lost.append("lost: leases granted after the backup whose rows were unreadable")
    try:
        ledger = Ledger(new)
    except LedgerError as exc:
        raise LedgerError(f"the rebuilt ledger does not open: {exc.message}") from exc
    try:
        ledger.sync_gpus(evidence.topology.gpus, now)
        outcome.lost += _lost_in_rows(ledger, salvage)
        _rebuild_carried(ledger, evidence, now, outcome)
        _hold_unexplained(ledger, evidence, now, outcome)
        outcome.active = len(ledger.active_leases())
        summary = "; ".join(outcome.lines())[:MAX_SUMMARY]
        ledger.record_recovery(now, os.geteuid(), _user(os.geteuid()), summary)
    finally:
        ledger.close()
    return outcome
