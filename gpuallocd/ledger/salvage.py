"""Reading what SQLite can still read of a damaged ledger, row by row, into a new one.

Each table of the ledger is read whole; where a read fails part way, it is read again one
row at a time by rowid, skipping the rows on pages SQLite cannot read. Where the units'
table (`lease_gpus`) is damaged, its primary key's index is read too: it names each unit's
lease and GPU on pages of its own, which often survive the table's.

What was read is written into a new ledger (the current schema), perhaps a backup's copy:
a table read whole replaces the backup's rows of it (the damaged file is newer: a drain
lifted, a reservation cancelled, a cleanup done since the backup stay so); a table read in
part is laid over the backup's, the salvaged row winning where both have one.

Every connection here is a plain `sqlite3` one on files the recovery owns (copies), never
the daemon's ledger in service.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuallocd.ledger.hot import grant_steps
from gpuallocd.model import Lease, LeaseEvent

__all__ = [
    "TABLES",
    "SalvageReport",
    "end_lease",
    "lay_over",
    "normalise",
    "read_tables",
    "restore_lease",
]

# Parents before children (foreign keys); the tables a salvage copies, in order.
TABLES = (
    "meta",
    "gpus",
    "leases",
    "lease_gpus",
    "lease_requests",
    "history",
    "preemptible_leases",
    "preemptions",
    "drains",
    "admin_actions",
    "advance_reservations",
    "reservation_events",
    "unleased_use",
    "pending_cleanups",
    "energy_use",
    "power_caps",
)
UNIT_KEY_INDEX = "sqlite_autoindex_lease_gpus_1"  # lease_gpus' primary key (lease_id, gpu_uuid)
MISSES_BEFORE_GIVING_UP = 10_000  # rowids tried past the last one read, when max() fails
Rows = list[tuple[Any, ...]]


@dataclass
class SalvageReport:
    """What was read of each table, and which reads failed."""

    rows: dict[str, tuple[list[str], Rows]] = field(default_factory=dict)
    damaged_tables: dict[str, str] = field(default_factory=dict)  # table: first error
    unreadable: str | None = None  # the file could not be opened or read at all
    unit_keys: list[tuple[str, str]] = field(default_factory=list)  # (lease, unit) from the index

    @property
    def complete(self) -> bool:
        return self.unreadable is None and not self.damaged_tables

    def count(self, table: str) -> int:
        return len(self.rows.get(table, ([], []))[1])

    def schema_version(self) -> int | None:
        """The schema version the damaged ledger recorded, where its row was read."""
        columns, rows = self.rows.get("meta", ([], []))
        if "key" not in columns or "value" not in columns:
            return None
        key, value = columns.index("key"), columns.index("value")
        found = [row[value] for row in rows if row[key] == "schema_version"]
        try:
            return int(found[0]) if found else None
        except (TypeError, ValueError):
            return None

    def whole(self, table: str) -> bool:
        """Whether `table` was read whole (every row of it the damaged file held)."""
        return table in self.rows and table not in self.damaged_tables


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(row[1]) for row in conn.execute(f'PRAGMA table_info("{table}")')]


def _rowids(conn: sqlite3.Connection, table: str) -> Iterator[int]:
    try:
        top = conn.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
    except sqlite3.Error:
        top = None
    if top is not None:
        yield from range(1, int(top) + 1)
        return
    rowid = 0
    while rowid < MISSES_BEFORE_GIVING_UP:  # no maximum: walk until a long run of misses
        rowid += 1
        yield rowid


def _row_by_row(conn: sqlite3.Connection, table: str, columns: list[str]) -> Rows:
    quoted = ", ".join(f'"{c}"' for c in columns)
    select = f'SELECT {quoted} FROM "{table}" WHERE rowid = ?'
    rows: Rows = []
    for rowid in _rowids(conn, table):
        try:
            row = conn.execute(select, (rowid,)).fetchone()
        except sqlite3.Error:
            continue
        if row is not None:
            rows.append(tuple(row))
    return rows


def _unit_keys(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """The (lease, unit) pairs of lease_gpus' primary key index, as far as it reads."""
    found: list[tuple[str, str]] = []
    query = f"SELECT lease_id, gpu_uuid FROM lease_gpus INDEXED BY {UNIT_KEY_INDEX}"
    try:
        for lease_id, unit in conn.execute(query):
            found.append((str(lease_id), str(unit)))
    except sqlite3.Error:
        pass  # what was read before the damaged page stands
    return found


def _read_table(conn: sqlite3.Connection, table: str, report: SalvageReport) -> None:
    try:
        columns = _columns(conn, table)
    except sqlite3.Error as exc:
        report.damaged_tables[table] = str(exc)
        return
    if not columns:
        return  # a table this ledger never had (older schema): nothing lost
    quoted = ", ".join(f'"{c}"' for c in columns)
    try:
        rows = [tuple(r) for r in conn.execute(f'SELECT {quoted} FROM "{table}"')]
    except sqlite3.Error as exc:
        report.damaged_tables[table] = str(exc)
        rows = _row_by_row(conn, table, columns)
        if table == "lease_gpus":
            report.unit_keys = _unit_keys(conn)
    report.rows[table] = (columns, rows)


def read_tables(path: Path) -> SalvageReport:
    """Everything SQLite can read of the ledger at `path` (a copy: its WAL is replayed)."""
    report = SalvageReport()
    try:
        conn = sqlite3.connect(str(path))
    except sqlite3.Error as exc:
        report.unreadable = str(exc)
        return report
    try:
        try:
            conn.execute("PRAGMA query_only=1")
        except sqlite3.Error as exc:
            report.unreadable = str(exc)
            return report
        for table in TABLES:
            _read_table(conn, table, report)
    finally:
        conn.close()  # also when it is unreadable: an open handle is a leak
    if not report.rows and report.damaged_tables:
        report.unreadable = next(iter(report.damaged_tables.values()))
    return report


def lay_over(target: sqlite3.Connection, report: SalvageReport) -> int:
    """Write the salvaged rows into `target` (a ledger of the current schema); the rows that
    could not be written (they break a constraint) are counted and returned."""
    refused = 0
    for table in TABLES:
        if table == "meta" or table not in report.rows:
            continue
        columns, rows = report.rows[table]
        known = set(_columns(target, table))
        keep = [i for i, c in enumerate(columns) if c in known]
        names = ", ".join(f'"{columns[i]}"' for i in keep)
        if report.whole(table):
            target.execute(f'DELETE FROM "{table}"')  # the newer file's rows, and only them
        sql = f'INSERT OR REPLACE INTO "{table}" ({names}) VALUES ({", ".join("?" for _ in keep)})'
        if table == "lease_gpus":  # ended units first: an active one then displaces them
            rows = sorted(rows, key=lambda r: bool(r[columns.index("active")]))
        for row in rows:
            try:
                target.execute(sql, [row[i] for i in keep])
            except sqlite3.Error:
                refused += 1
    return refused


def normalise(conn: sqlite3.Connection) -> None:
    """Make leases and their units agree after rows from two files met: a unit of an ended
    lease is ended. (An active lease left with no active unit is the rebuild's to judge.)"""
    conn.execute(
        "UPDATE lease_gpus SET active = 0 WHERE active = 1 AND lease_id NOT IN "
        "(SELECT id FROM leases WHERE state = 'active')"
    )


# A lease's caps by GPU: the GPUs' records it wrote as their first capped lease, overridden by
# its units' own (the ended rows salvage found, which a later lease of the GPU writes too).
_RECORDED_CAPS = (
    "SELECT gpu_uuid, set_mw FROM power_caps WHERE lease_id = ? "
    "UNION ALL SELECT gpu_uuid, cap_mw FROM lease_gpus WHERE lease_id = ? AND cap_mw IS NOT NULL"
)


def _steps_into(
    lease: Lease, tables: Sequence[str], caps: Mapping[str, int]
) -> list[tuple[str, Sequence[Any]]]:
    """The grant's own statements for `lease` (hot.py) that write into `tables`."""
    return [
        step
        for step in grant_steps(lease, lease.owner_uid, caps=caps)
        if any(step[0].startswith(f"INSERT INTO {table} ") for table in tables)
    ]


def restore_lease(
    conn: sqlite3.Connection, lease: Lease, *, row_kept: bool, detail: str, at: float
) -> None:
    """Write `lease` back as the grant wrote it: its units (in place of the ended rows of
    them that salvage found, with the power caps those rows say it set, or else the GPUs'
    records of it), and its row where the row was lost (`row_kept` False); an `adopted`
    event says why. Its `granted` event is its own."""
    tables = ("lease_gpus",) if row_kept else ("leases", "lease_gpus")
    caps = dict(conn.execute(_RECORDED_CAPS, (lease.id, lease.id)))
    conn.execute("DELETE FROM lease_gpus WHERE lease_id = ? AND active = 0", (lease.id,))
    for sql, parameters in _steps_into(lease, tables, caps):
        conn.execute(sql, parameters)
    _event(conn, lease.id, LeaseEvent.ADOPTED.value, at, detail)


def end_lease(conn: sqlite3.Connection, lease_id: str, at: float, detail: str) -> None:
    """End an active lease the records show had ended (its end's own rows were lost)."""
    conn.execute("UPDATE leases SET state = 'revoked', ended_at = ? WHERE id = ?", (at, lease_id))
    conn.execute("UPDATE lease_gpus SET active = 0 WHERE lease_id = ?", (lease_id,))
    _event(conn, lease_id, "revoked", at, detail)


def _event(conn: sqlite3.Connection, lease_id: str, event: str, at: float, detail: str) -> None:
    conn.execute(
        "INSERT INTO history (lease_id, event, actor_uid, at, detail) VALUES (?, ?, 0, ?, ?)",
        (lease_id, event, at, detail),
    )
