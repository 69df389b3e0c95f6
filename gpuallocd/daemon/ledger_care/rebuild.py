"""Building the recovered ledger: salvaged rows, else a backup under them, then the leases the
records back and the GPUs the machine shows in use.

1. Rows: what SQLite could read of the damaged ledger (ledger/salvage.py). Where every table
   read whole, that is the ledger. Otherwise the newest backup that passes its check is the
   base and the salvaged rows are laid over it, then units of ended leases are ended.
2. The records (records.py) and the machine (machine.py): which leases the records show
   held without a unit, and which processes run on which GPU, owned by whom, carrying which
   lease id (believed only for a lease the records give the same user).
3. Each lease held without units comes back under its own id where the records or the
   driver show its GPUs, or is kept where its job runs, or ended where the records show it
   had ended (restore.py). Only then does what is still unexplained on a GPU get held: as
   its one user's lease within their limits, else for the admins (holds.py). The ledger's
   unique index refuses any double booking, here as in service.
4. Every line names the owners concerned; the lines are returned for the log and recorded
   as an admin action (`recover`) in the ledger.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuallocd.allocator import AllocatorSettings, SiteRules
from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.parts import SharedParts
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.site.reservation_board import caller_of_uid
from gpuallocd.allocator.unleased.adoption import Adoption
from gpuallocd.daemon.ledger_care.holds import Holding, hold_unexplained
from gpuallocd.daemon.ledger_care.machine import read_machine
from gpuallocd.daemon.ledger_care.records import Recorded, read_records, user_name
from gpuallocd.daemon.ledger_care.restore import Restored, WithinLimits, restore
from gpuallocd.errors import CallerError, CapacityError, LedgerError
from gpuallocd.ledger import Ledger
from gpuallocd.ledger.backups import BackupInfo
from gpuallocd.ledger.salvage import SalvageReport, lay_over, normalise
from gpuallocd.model import LeasedGpu, LiveState, Topology
from gpuallocd.processes.lease_environ import LeaseCarrier

__all__ = ["Evidence", "Outcome", "Site", "rebuild"]

MAX_SUMMARY = 8000
MAX_UNSURE_IDS = 5


@dataclass(frozen=True)
class Evidence:
    """What the machine shows now: its GPUs, their processes, and the lease ids carried."""

    topology: Topology
    live: Mapping[str, LiveState]
    carriers: Sequence[LeaseCarrier]


@dataclass(frozen=True)
class Site:
    """The rules a grant obeys on this node, which a lease the recovery makes obeys too."""

    settings: AllocatorSettings
    rules: SiteRules


@dataclass
class Outcome:
    """What the recovery did and found, one line each."""

    source: str
    rebuilt: list[str] = field(default_factory=list)  # leases back under their own ids
    held: list[str] = field(default_factory=list)  # units in use that no lease explained
    notes: list[str] = field(default_factory=list)  # ended, set aside, damaged, kept
    lost: list[str] = field(default_factory=list)
    active: int = 0

    def lines(self) -> list[str]:
        return [f"source: {self.source}", *self.rebuilt, *self.held, *self.notes, *self.lost]


def _stamp(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _base(new: Path, salvage: SalvageReport, backup: BackupInfo | None) -> str:
    """Lay the base down: a backup's copy, or nothing (the salvage alone)."""
    if backup is not None and not salvage.complete:
        shutil.copyfile(backup.path, new)
        os.chmod(new, 0o600)
        source = (
            f"backup {backup.path.name} (taken {_stamp(backup.taken_at)}) with what the "
            "damaged file held"
        )
    elif salvage.complete:
        source = "every row of the damaged ledger (SQLite read it all)"
    else:
        source = "what SQLite could read of the damaged ledger (no good backup)"
    Ledger(new).close()  # the current schema (a backup of an older one is migrated)
    return source


def _base_units(new: Path) -> dict[str, set[str]]:
    """The active units of the base (a backup's), by lease, before the salvage covers them."""
    conn = sqlite3.connect(str(new))
    try:
        rows = conn.execute("SELECT lease_id, gpu_uuid FROM lease_gpus WHERE active = 1")
        found: dict[str, set[str]] = {}
        for lease_id, unit in rows:
            found.setdefault(str(lease_id), set()).add(str(unit))
        return found
    finally:
        conn.close()


def _lay_rows(new: Path, salvage: SalvageReport) -> int:
    conn = sqlite3.connect(str(new), isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        refused = lay_over(conn, salvage)
        normalise(conn)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return refused


def _damage_notes(salvage: SalvageReport, backup: BackupInfo | None, refused: int) -> list[str]:
    notes = []
    if salvage.unreadable is not None and not salvage.rows:
        line = f"damaged: the whole file ({salvage.unreadable}); no row of it was read"
        if backup is not None:
            line += (
                f"; a lease granted after the backup of {_stamp(backup.taken_at)} is known "
                "to no record and cannot be listed here"
            )
        return [line]
    for table, error in sorted(salvage.damaged_tables.items()):
        line = f"damaged: table {table} ({error}); its readable rows were kept"
        if table == "leases" and backup is not None:
            line += (
                f"; a lease granted after the backup of {_stamp(backup.taken_at)} that no "
                "other readable row names cannot be listed here"
            )
        notes.append(line)
    if refused:
        notes.append(f"refused: {refused} salvaged row(s) that broke the ledger's rules")
    return notes


def _unsure(restored: Restored) -> list[str]:
    """One line per owner of the leases whose records cannot say whether they were held."""
    lines = []
    for owner, ids in sorted(restored.unsure.items()):
        shown = ", ".join(sorted(ids)[:MAX_UNSURE_IDS])
        more = f" and {len(ids) - MAX_UNSURE_IDS} more" if len(ids) > MAX_UNSURE_IDS else ""
        lines.append(
            f"unsure: {len(ids)} lease(s) of {owner} ({shown}{more}): their own rows and part "
            "of their history were unreadable; any of them still held is lost"
        )
    return lines


def _within_limits(quota: Quota, ledger: Ledger) -> WithinLimits:
    """Whether units are within a lease owner's limits, as a grant of them would be."""

    def check(lease: Recorded, units: Sequence[LeasedGpu]) -> str | None:
        owner = caller_of_uid(lease.owner_uid if lease.owner_uid is not None else -1)
        weight = sum(unit.fraction for unit in units)
        try:
            quota.check_grant(owner, ledger.active_leases(), gpus=weight)
        except (CallerError, CapacityError) as exc:
            return exc.message
        return None

    return check


def rebuild(
    new: Path,
    salvage: SalvageReport,
    backup: BackupInfo | None,
    evidence: Evidence,
    now: float,
    site: Site,
) -> Outcome:
    """Build the recovered ledger at `new` (a path of the recovery's own)."""
    outcome = Outcome(_base(new, salvage, backup))
    on_backup = backup is not None and not salvage.complete
    base_units = _base_units(new) if on_backup else {}
    refused = _lay_rows(new, salvage)
    carried = {c.lease_id for c in evidence.carriers}
    records = read_records(new, salvage, base_units, carried)
    machine = read_machine(evidence.topology, evidence.live, evidence.carriers, records)
    try:
        ledger = Ledger(new)
    except LedgerError as exc:
        raise LedgerError(f"the rebuilt ledger does not open: {exc.message}") from exc
    try:
        # the recovery's own lifecycle, made as the daemon's is (allocator/leases/parts.py)
        parts = SharedParts.of(
            ledger, evidence.topology, clock=lambda: now, settings=site.settings, rules=site.rules
        )
        lifecycle = LeaseLifecycle(ledger, parts, clock=lambda: now)
        restored = restore(
            new,
            records,
            machine,
            evidence.topology,
            _within_limits(parts.quota, ledger),
            now=now,
            hold_seconds=site.settings.max_ttl_seconds,
        )
        lifecycle.reload()
        parts.node.update_live(evidence.live)
        outcome.rebuilt = restored.rebuilt
        adoption = Adoption(
            lifecycle,
            node=parts.node,
            quota=parts.quota,
            drains=parts.drains,
            reservations=parts.reservations,
        )
        holding = Holding(lifecycle, parts.node, adoption, site.settings.max_ttl_seconds)
        outcome.held = hold_unexplained(holding, machine, now)
        ledger.rebuild_totals()  # the users' running totals, from the leases restored
        outcome.notes = [
            *restored.ended,
            *machine.set_aside,
            *_damage_notes(salvage, backup if on_backup else None, refused),
            *_unsure(restored),
        ]
        outcome.lost = restored.lost
        outcome.active = len(ledger.active_leases())
        summary = "; ".join(outcome.lines())[:MAX_SUMMARY]
        ledger.record_recovery(now, os.geteuid(), user_name(os.geteuid()), summary)
    finally:
        ledger.close()
    return outcome
