"""Reading what SQLite can still read of a damaged ledger, row by row, into a new one.

Each table of the ledger is read whole; where a read fails part way, it is read again one
row at a time by rowid, skipping the rows on pages SQLite cannot read. What was read is
written into a new ledger (the current schema) with `INSERT OR IGNORE`, so rows already
there (those of a backup it is laid over) are kept when they conflict with a salvaged row
... except leases and their units, which the salvage overwrites: the damaged file is newer
than any backup, and a lease that ended there must not come back active.

Every connection here is a plain `sqlite3` one on files the recovery owns (copies), never
the daemon's ledger in service.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["TABLES", "SalvageReport", "lay_over", "normalise", "read_tables"]

# Parents before children (foreign keys); the tables a salvage copies, in order.
TABLES = (
    "meta",
    "gpus",
    "leases",
    "lease_gpus",
    "lease_requests",
    "history",
    "drains",
    "admin_actions",
    "advance_reservations",
    "reservation_events",
    "unleased_use",
)
NEWER_WINS = frozenset({"leases", "lease_gpus", "lease_requests"})
MISSES_BEFORE_GIVING_UP = 10_000  # rowids tried past the last one read, when max() fails
Rows = list[tuple[Any, ...]]


@dataclass
class SalvageReport:
    """What was read of each table, and which reads failed."""

    rows: dict[str, tuple[list[str], Rows]] = field(default_factory=dict)
    damaged_tables: dict[str, str] = field(default_factory=dict)  # table: first error
    unreadable: str | None = None  # the file could not be opened or read at all

    @property
    def complete(self) -> bool:
        return self.unreadable is None and not self.damaged_tables

    def count(self, table: str) -> int:
        return len(self.rows.get(table, ([], []))[1])


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
        verb = "INSERT OR REPLACE" if table in NEWER_WINS else "INSERT OR IGNORE"
        sql = f'{verb} INTO "{table}" ({names}) VALUES ({", ".join("?" for _ in keep)})'
        if table == "lease_gpus":  # an ended unit may not turn active: end first, then copy
            rows = sorted(rows, key=lambda r: bool(r[columns.index("active")]))
        for row in rows:
            try:
                target.execute(sql, [row[i] for i in keep])
            except sqlite3.Error:
                refused += 1
    return refused


def normalise(conn: sqlite3.Connection, now: float) -> list[str]:
    """Make leases and their units agree after rows from two files met: a unit of an ended
    lease is ended; an active lease left with no active unit (its GPUs went to a newer lease
    in the salvaged rows) is ended, and its id returned."""
    conn.execute(
        "UPDATE lease_gpus SET active = 0 WHERE active = 1 AND lease_id NOT IN "
        "(SELECT id FROM leases WHERE state = 'active')"
    )
    orphans = [
        str(row[0])
        for row in conn.execute(
            "SELECT id FROM leases WHERE state = 'active' AND id NOT IN "
            "(SELECT lease_id FROM lease_gpus WHERE active = 1)"
        )
    ]
    for lease_id in orphans:
        conn.execute(
            "UPDATE leases SET state = 'revoked', ended_at = ? WHERE id = ?", (now, lease_id)
        )
        conn.execute(
            "INSERT INTO history (lease_id, event, actor_uid, at, detail) "
            "VALUES (?, 'revoked', 0, ?, ?)",
            (lease_id, now, "recovery: its GPUs are in a newer lease of the damaged ledger"),
        )
    return orphans
