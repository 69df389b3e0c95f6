"""Upgrading a ledger written by an older gpuallocd, one schema version at a time.

Each entry brings a ledger from the version before it to its version. They run in one
transaction when the daemon opens the ledger, so an upgrade happens whole or not at all.
"""

from __future__ import annotations

from sqlalchemy import Connection

__all__ = ["MIGRATIONS", "migrate"]

MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 2: leases may be bound to the requesting process (pid + start time).
    2: (
        "ALTER TABLE leases ADD COLUMN bound BOOLEAN NOT NULL DEFAULT 0",
        "ALTER TABLE leases ADD COLUMN pid_start_time INTEGER",
    ),
    # 3: waiting time per lease (accounting), indexes for usage and purge by end time; the
    # new tables (drains, admin_actions) are created after the migrations run.
    3: (
        "ALTER TABLE leases ADD COLUMN waited_seconds FLOAT NOT NULL DEFAULT 0",
        "CREATE INDEX IF NOT EXISTS leases_by_end ON leases (ended_at)",
        "CREATE INDEX IF NOT EXISTS leases_by_owner ON leases (owner_uid, ended_at)",
    ),
}


def migrate(conn: Connection, found: int, target: int) -> None:
    """Apply every migration after `found` up to `target`, in order."""
    for version in range(found + 1, target + 1):
        for statement in MIGRATIONS.get(version, ()):
            conn.exec_driver_sql(statement)
        conn.exec_driver_sql(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),)
        )
