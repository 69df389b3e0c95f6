"""Upgrading a ledger written by an older gpuallocd, one schema version at a time.

Each entry brings a ledger from the version before it to its version. They run in one
transaction when the daemon opens the ledger, so an upgrade happens whole or not at all.
They are the only way a table, column, index or trigger comes into an existing ledger:
the metadata in schema.py makes new ledgers, and a test holds both to the same schema,
recorded per version (tests/test_ledger_schema_versions.py). A change to the schema is a
new version with its entry here; an entry once released is never edited, so its SQL is
written out, not built from the metadata (which moves on).

A version that only some branches have (two changes made apart) is merged into one entry:
the statements of both, under the one number.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import cast

from sqlalchemy import Connection

from gpuallocd.ledger.schema import UNIT_TRIGGERS, use_marks
from gpuallocd.ledger.totals import rebuild_totals

__all__ = ["MIGRATIONS", "migrate", "stored_version"]

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
    # 4: waiting time per lease (accounting), indexes for usage and purge by end time,
    # drained GPUs and the admins' actions.
    4: (
        "ALTER TABLE leases ADD COLUMN waited_seconds FLOAT NOT NULL DEFAULT 0",
        "CREATE INDEX IF NOT EXISTS leases_by_end ON leases (ended_at)",
        "CREATE INDEX IF NOT EXISTS leases_by_owner ON leases (owner_uid, ended_at)",
        "CREATE TABLE IF NOT EXISTS drains (gpu_uuid VARCHAR NOT NULL, reason TEXT NOT NULL, "
        "by_uid INTEGER NOT NULL, by_user VARCHAR NOT NULL, at FLOAT NOT NULL, "
        "PRIMARY KEY (gpu_uuid))",
        "CREATE TABLE IF NOT EXISTS admin_actions (seq INTEGER NOT NULL, at FLOAT NOT NULL, "
        "action VARCHAR NOT NULL, target VARCHAR NOT NULL, actor_uid INTEGER NOT NULL, "
        "actor VARCHAR NOT NULL, reason TEXT, PRIMARY KEY (seq))",
        "CREATE INDEX IF NOT EXISTS admin_actions_by_time ON admin_actions (at)",
    ),
    # 5: advance reservations, unleased use, request ids, pending cleanups, energy, the
    # power caps' put-backs, the notices and preemptible leases. Most of these tables came in
    # while the version stayed 4, so a ledger labelled 4 may hold some of them already: each
    # is made only where it is missing.
    5: (
        "CREATE TABLE IF NOT EXISTS advance_reservations (id VARCHAR NOT NULL, "
        "gpus TEXT NOT NULL, start_at FLOAT NOT NULL, end_at FLOAT NOT NULL, user VARCHAR, "
        '"group" VARCHAR, reason TEXT NOT NULL, by_uid INTEGER NOT NULL, '
        "by_user VARCHAR NOT NULL, created_at FLOAT NOT NULL, cancelled_at FLOAT, "
        "PRIMARY KEY (id))",
        "CREATE INDEX IF NOT EXISTS advance_reservations_by_end ON advance_reservations (end_at)",
        "CREATE TABLE IF NOT EXISTS reservation_events (seq INTEGER NOT NULL, "
        "reservation_id VARCHAR NOT NULL, event VARCHAR NOT NULL, actor_uid INTEGER NOT NULL, "
        "at FLOAT NOT NULL, detail TEXT, PRIMARY KEY (seq), "
        "FOREIGN KEY(reservation_id) REFERENCES advance_reservations (id))",
        "CREATE INDEX IF NOT EXISTS reservation_events_by_reservation ON reservation_events "
        "(reservation_id)",
        "CREATE TABLE IF NOT EXISTS unleased_use (seq INTEGER NOT NULL, at FLOAT NOT NULL, "
        "action VARCHAR NOT NULL, gpu_uuid VARCHAR NOT NULL, unit_uuid VARCHAR NOT NULL, "
        "pid INTEGER NOT NULL, uid INTEGER, user VARCHAR NOT NULL, command VARCHAR NOT NULL, "
        "lease_id VARCHAR, detail TEXT NOT NULL, PRIMARY KEY (seq))",
        "CREATE INDEX IF NOT EXISTS unleased_use_by_time ON unleased_use (at)",
        "CREATE TABLE IF NOT EXISTS lease_requests (lease_id VARCHAR NOT NULL, "
        "owner_uid INTEGER NOT NULL, request_id VARCHAR NOT NULL, PRIMARY KEY (lease_id)) "
        "WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS pending_cleanups (id INTEGER NOT NULL, "
        "kind VARCHAR NOT NULL, target VARCHAR NOT NULL, payload TEXT NOT NULL, "
        "lease_id VARCHAR, created_at FLOAT NOT NULL, attempts INTEGER NOT NULL, "
        "next_try FLOAT NOT NULL, last_error TEXT, PRIMARY KEY (id))",
        "CREATE UNIQUE INDEX IF NOT EXISTS one_pending_cleanup ON pending_cleanups "
        "(kind, target, payload)",
        "CREATE TABLE IF NOT EXISTS energy_use (seq INTEGER NOT NULL, lease_id VARCHAR, "
        "owner_uid INTEGER NOT NULL, owner_name VARCHAR NOT NULL, at FLOAT NOT NULL, "
        "joules FLOAT NOT NULL, estimate BOOLEAN NOT NULL, "
        "gpu_seconds FLOAT DEFAULT '0' NOT NULL, PRIMARY KEY (seq))",
        "CREATE INDEX IF NOT EXISTS energy_use_by_lease ON energy_use (lease_id)",
        "CREATE INDEX IF NOT EXISTS energy_use_by_owner ON energy_use (owner_uid, at)",
        "CREATE INDEX IF NOT EXISTS energy_use_by_time ON energy_use (at)",
        "CREATE TABLE IF NOT EXISTS power_caps (gpu_uuid VARCHAR NOT NULL, "
        "lease_id VARCHAR NOT NULL, set_mw INTEGER NOT NULL, restore_mw INTEGER NOT NULL, "
        "PRIMARY KEY (gpu_uuid, lease_id))",
        # the per-user feed of notices, their thresholds and the notifiers' delivery reports
        "CREATE TABLE IF NOT EXISTS notices (seq INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "
        'uid INTEGER NOT NULL, user VARCHAR NOT NULL, kind VARCHAR NOT NULL, "key" VARCHAR '
        "NOT NULL, lease_id VARCHAR, at FLOAT NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL, "
        "data TEXT NOT NULL)",
        'CREATE UNIQUE INDEX IF NOT EXISTS one_notice_per_key ON notices (uid, "key")',
        "CREATE INDEX IF NOT EXISTS notices_by_uid ON notices (uid, seq)",
        "CREATE INDEX IF NOT EXISTS notices_by_time ON notices (at)",
        "CREATE TABLE IF NOT EXISTS notify_settings (uid INTEGER NOT NULL, "
        "thresholds VARCHAR NOT NULL, updated_at FLOAT NOT NULL, PRIMARY KEY (uid))",
        "CREATE TABLE IF NOT EXISTS notify_reports (uid INTEGER NOT NULL, "
        "channel VARCHAR NOT NULL, kind VARCHAR NOT NULL, at FLOAT NOT NULL, ok BOOLEAN NOT NULL, "
        "error TEXT, failures INTEGER NOT NULL, last_ok_at FLOAT, PRIMARY KEY (uid, channel))",
        # what a revoke does to a lease's processes, so that a restarted daemon still stops
        # a `run` command whose wrapper died (a lease of an older ledger keeps "notify")
        "ALTER TABLE leases ADD COLUMN on_revoke VARCHAR NOT NULL DEFAULT 'notify'",
        # preemptible leases (docs/preemption.md): their terms and each preemption's deadline
        # and state; every lease granted before stays non-preemptible
        "CREATE TABLE IF NOT EXISTS preemptible_leases (lease_id VARCHAR NOT NULL, "
        "min_runtime_seconds FLOAT NOT NULL, lead_seconds FLOAT NOT NULL, "
        "grace_seconds FLOAT NOT NULL, signal VARCHAR NOT NULL, queued_since FLOAT NOT NULL, "
        "requeue_of VARCHAR, checkpoint_at FLOAT, checkpoint_path TEXT, PRIMARY KEY (lease_id), "
        "FOREIGN KEY(lease_id) REFERENCES leases (id))",
        "CREATE INDEX IF NOT EXISTS preemptible_leases_by_requeue ON preemptible_leases "
        "(requeue_of)",
        "CREATE TABLE IF NOT EXISTS preemptions (lease_id VARCHAR NOT NULL, "
        'owner_uid INTEGER NOT NULL, owner_name VARCHAR NOT NULL, "trigger" VARCHAR NOT NULL, '
        "for_uid INTEGER, for_user VARCHAR NOT NULL, explanation TEXT NOT NULL, "
        "decided_at FLOAT NOT NULL, signal_at FLOAT NOT NULL, deadline_at FLOAT NOT NULL, "
        "signal VARCHAR NOT NULL, state VARCHAR NOT NULL, signalled_at FLOAT, ended_at FLOAT, "
        "acknowledged_at FLOAT, checkpoint TEXT, late BOOLEAN NOT NULL, PRIMARY KEY (lease_id), "
        "FOREIGN KEY(lease_id) REFERENCES leases (id))",
        "CREATE INDEX IF NOT EXISTS open_preemptions ON preemptions (state) "
        "WHERE state IN ('warned', 'signalled')",
    ),
    # 6: each user's running totals (ledger/totals.py), rebuilt from the history.
    6: (_add_running_totals,),
    # 7: a bound lease may follow its work: when its holder exits, the owner's processes
    # that carry its id keep it (a lease of an older ledger does not)
    7: ("ALTER TABLE leases ADD COLUMN follow_work BOOLEAN NOT NULL DEFAULT 0",),
    # 8: each idle lease's spell, the name of its warnings before idle reclaim across a
    # restart (docs/notifications.md); none at the upgrade: a spell starts at the next sample
    8: (
        "CREATE TABLE IF NOT EXISTS idle_spells (lease_id VARCHAR NOT NULL, since FLOAT NOT "
        "NULL, PRIMARY KEY (lease_id), FOREIGN KEY(lease_id) REFERENCES leases (id))",
    ),
    # 9: each unit's power cap on its lease's row of it; a `power_caps` row is only the limit
    # owed back to its GPU, no longer moved to each lease that keeps the cap
    9: (
        "ALTER TABLE lease_gpus ADD COLUMN cap_mw INTEGER",
        "UPDATE lease_gpus SET cap_mw = (SELECT p.set_mw FROM power_caps p "
        "WHERE p.gpu_uuid = lease_gpus.gpu_uuid AND p.lease_id = lease_gpus.lease_id) "
        "WHERE active = 1",
    ),
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


def stored_version(path: Path) -> int | None:
    """The schema version the ledger at `path` records, read without changing it; None
    where there is no ledger yet, or it records none (or SQLite cannot read it)."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row is not None else None
    except (sqlite3.Error, ValueError):
        return None
    finally:
        conn.close()
