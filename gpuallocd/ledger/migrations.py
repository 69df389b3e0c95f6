"""Upgrading a ledger written by an older gpuallocd, one schema version at a time.

Each entry brings a ledger from the version before it to its version. They run in one
transaction when the daemon opens the ledger, so an upgrade happens whole or not at all.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import cast

from sqlalchemy import Connection

from gpuallocd.ledger.schema import UNIT_TRIGGERS, use_marks
from gpuallocd.ledger.totals import rebuild_totals

__all__ = ["MIGRATIONS", "migrate"]

Step = str | Callable[[Connection], None]


def _add_running_totals(conn: Connection) -> None:
    """The users' running totals, built from the leases and energy readings already kept."""
    use_marks.create(conn, checkfirst=True)
    rebuild_totals(cast(sqlite3.Connection, conn.connection.driver_connection))


MIGRATIONS: dict[int, tuple[Step, ...]] = {
    # 2: leases may be bound to the requesting process (pid + start time).
    2: (
        "ALTER TABLE leases ADD COLUMN bound BOOLEAN NOT NULL DEFAULT 0",
        "ALTER TABLE leases ADD COLUMN pid_start_time INTEGER",
    ),
    # 3: leases of MIG instances and memory shares; the shares' invariants as triggers.
    3: (
        "ALTER TABLE gpus ADD COLUMN parent_uuid VARCHAR",
        "ALTER TABLE gpus ADD COLUMN share_capacity_bytes INTEGER",
        "ALTER TABLE lease_gpus ADD COLUMN kind VARCHAR NOT NULL DEFAULT 'whole'",
        "ALTER TABLE lease_gpus ADD COLUMN gpu_of VARCHAR",
        "ALTER TABLE lease_gpus ADD COLUMN memory_bytes INTEGER",
        "ALTER TABLE lease_gpus ADD COLUMN profile VARCHAR",
        "ALTER TABLE lease_gpus ADD COLUMN fraction FLOAT NOT NULL DEFAULT 1.0",
        "UPDATE lease_gpus SET gpu_of = gpu_uuid",
        "DROP INDEX one_active_lease_per_gpu",
        "CREATE UNIQUE INDEX one_active_lease_per_gpu ON lease_gpus (gpu_uuid) "
        "WHERE active = 1 AND kind != 'share'",
        "CREATE INDEX active_units_by_gpu ON lease_gpus (gpu_of) WHERE active = 1",
        *UNIT_TRIGGERS,
    ),
    # 4: waiting time per lease (accounting), indexes for usage and purge by end time; the
    # new tables (drains, admin_actions) are created after the migrations run.
    4: (
        "ALTER TABLE leases ADD COLUMN waited_seconds FLOAT NOT NULL DEFAULT 0",
        "CREATE INDEX IF NOT EXISTS leases_by_end ON leases (ended_at)",
        "CREATE INDEX IF NOT EXISTS leases_by_owner ON leases (owner_uid, ended_at)",
    ),
    # 6: each user's running totals (ledger/totals.py), rebuilt from the history.
    6: (_add_running_totals,),
}


def migrate(conn: Connection, found: int, target: int) -> None:
    """Apply every migration after `found` up to `target`, in order."""
    for version in range(found + 1, target + 1):
        for step in MIGRATIONS.get(version, ()):
            if isinstance(step, str):
                conn.exec_driver_sql(step)
            else:
                step(conn)
        conn.exec_driver_sql(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),)
        )
