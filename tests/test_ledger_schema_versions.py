"""The ledger's schema versions: every change to the schema is a new version with its
migration, an upgrade keeps every lease and takes a backup first, and a ledger of a newer
version is refused in one line that names the way back.

The schema of each version is recorded here as a fingerprint: its tables, columns,
indexes, triggers and foreign keys as SQLite describes them (not the SQL text, which an
ALTER writes differently), without columns' defaults (every insert names every column).
A released version's fingerprint never changes: a change to the metadata in
`ledger/schema.py` fails the first test until it is a new `SCHEMA_VERSION`, with its entry in
`ledger/migrations.py` and its fingerprint recorded here."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from gpuallocd.ledger import Ledger, schema
from gpuallocd.ledger.migrations import MIGRATIONS
from gpuallocd.model import Lease, LeasedGpu, LeaseState
from gpuallocd.model.cleanup import Cleanup
from gpuallocd.model.power import PowerCap
from tests.harness import DaemonPaths, ProcessDaemon
from tests.ledger_damage import recover, start_refused

FINGERPRINTS = {
    1: "1b474abfd292e122",
    2: "0121d30b86e6ebc0",
    3: "1405c15956a0bbe0",
    4: "c71f1faa9bae7efb",
    5: "040bfdb86c6c23cb",
    6: "c14573affe80b081",
    7: "cf944e6536aeeb27",
    8: "4881dc04b832b5aa",
    9: "cefd4016654e4199",
}

# The first schema, as its daemon made it (its metadata's SQL).
SCHEMA_1 = """
CREATE TABLE meta ("key" VARCHAR NOT NULL, value VARCHAR NOT NULL, PRIMARY KEY ("key"));
CREATE TABLE gpus (uuid VARCHAR NOT NULL, gpu_index INTEGER NOT NULL, name VARCHAR NOT NULL,
    present BOOLEAN NOT NULL, first_seen FLOAT NOT NULL, last_seen FLOAT NOT NULL,
    PRIMARY KEY (uuid));
CREATE TABLE leases (id VARCHAR NOT NULL, owner_uid INTEGER NOT NULL,
    owner_name VARCHAR NOT NULL, pid INTEGER, label VARCHAR, policy VARCHAR NOT NULL,
    created_at FLOAT NOT NULL, expires_at FLOAT NOT NULL, state VARCHAR NOT NULL,
    ended_at FLOAT, PRIMARY KEY (id));
CREATE INDEX leases_by_state ON leases (state);
CREATE TABLE lease_gpus (lease_id VARCHAR NOT NULL, gpu_uuid VARCHAR NOT NULL,
    gpu_index INTEGER NOT NULL, position INTEGER NOT NULL, active BOOLEAN NOT NULL,
    PRIMARY KEY (lease_id, gpu_uuid), FOREIGN KEY(lease_id) REFERENCES leases (id),
    FOREIGN KEY(gpu_uuid) REFERENCES gpus (uuid));
CREATE UNIQUE INDEX one_active_lease_per_gpu ON lease_gpus (gpu_uuid) WHERE active = 1;
CREATE TABLE history (seq INTEGER NOT NULL, lease_id VARCHAR NOT NULL,
    event VARCHAR NOT NULL, actor_uid INTEGER NOT NULL, at FLOAT NOT NULL, detail TEXT,
    PRIMARY KEY (seq), FOREIGN KEY(lease_id) REFERENCES leases (id));
CREATE INDEX history_by_lease ON history (lease_id);
INSERT INTO meta VALUES ('schema_version', '1');
"""
TABLES_OF_5 = (
    "advance_reservations",
    "reservation_events",
    "unleased_use",
    "lease_requests",
    "pending_cleanups",
    "energy_use",
    "power_caps",
)


def _words(sql: str) -> str:
    return " ".join(sql.split())


def shape(conn: sqlite3.Connection) -> dict[str, Any]:
    """The schema of a ledger as SQLite describes it."""
    objects = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
        "ORDER BY type, name"
    ).fetchall()
    found: dict[str, Any] = {"tables": {}, "indexes": {}, "triggers": {}}
    for kind, name, table, sql in objects:
        if kind == "table":
            columns = conn.execute(f'PRAGMA table_info("{name}")').fetchall()
            keys = conn.execute(f'PRAGMA foreign_key_list("{name}")').fetchall()
            found["tables"][name] = {
                "columns": [(c[1], c[2].upper(), c[3], c[5]) for c in columns],
                "foreign_keys": sorted((k[2], k[3], k[4]) for k in keys),
                "without_rowid": "WITHOUT ROWID" in sql.upper(),
            }
        elif kind == "index":
            listed = conn.execute(f'PRAGMA index_list("{table}")').fetchall()
            unique = next(row[2] for row in listed if row[1] == name)
            where = _words(sql.split(" WHERE ", 1)[1]) if " WHERE " in sql else None
            columns = [c[2] for c in conn.execute(f'PRAGMA index_info("{name}")')]
            found["indexes"][name] = {"table": table, "unique": unique, "columns": columns}
            found["indexes"][name]["where"] = where
        elif kind == "trigger":
            found["triggers"][name] = _words(sql)
    return found


def fingerprint(conn: sqlite3.Connection) -> str:
    text = json.dumps(shape(conn), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _at_version(path: Path, version: int) -> Path:
    """A ledger of schema `version`: the first schema, then each migration up to it."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.executescript(SCHEMA_1)
        for step in range(2, version + 1):
            for statement in MIGRATIONS[step]:
                if isinstance(statement, str):
                    conn.execute(statement)
                else:  # a step in Python (a table built from the rows already kept)
                    engine = create_engine("sqlite://", creator=lambda: conn)
                    with engine.connect() as connection:
                        statement(connection)
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(step),))
    finally:
        conn.close()
    return path


def _fingerprint_of(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return fingerprint(conn)
    finally:
        conn.close()


def test_the_schema_of_this_version_is_the_one_recorded_for_it(tmp_path: Path) -> None:
    """A new ledger (made from the metadata) has the schema recorded for SCHEMA_VERSION: a
    table, column, index or trigger changed without a new version fails here."""
    Ledger(tmp_path / "new.db").close()
    found = _fingerprint_of(tmp_path / "new.db")
    assert sorted(FINGERPRINTS) == list(range(1, schema.SCHEMA_VERSION + 1)), (
        "each schema version, and no other, has its fingerprint recorded here"
    )
    assert found == FINGERPRINTS[schema.SCHEMA_VERSION], (
        f"the ledger's schema changed (fingerprint {found}) but SCHEMA_VERSION is still "
        f"{schema.SCHEMA_VERSION}: make it a new version, with its migration in "
        "ledger/migrations.py, and record the new fingerprint here"
    )


@pytest.mark.parametrize("version", range(1, schema.SCHEMA_VERSION + 1))
def test_the_migrations_reach_each_versions_recorded_schema(tmp_path: Path, version: int) -> None:
    """The first schema and the migrations up to a version make exactly the schema recorded
    for it: an upgraded ledger is a new one, and a released migration is never edited."""
    found = _fingerprint_of(_at_version(tmp_path / "old.db", version))
    assert found == FINGERPRINTS[version]
    assert len(set(FINGERPRINTS.values())) == len(FINGERPRINTS), "a version changed nothing"


GPU_ROWS = [("GPU-0", 0), ("GPU-1", 1), ("GPU-2", 2)]


def _lease(lease_id: str, index: int, owner: int = 1000) -> Lease:
    return Lease(
        lease_id,
        (LeasedGpu(f"GPU-{index}", index),),
        owner,
        f"u{owner}",
        42,
        "job",
        "simple",
        1.0,
        99999.0,
    )


def _set_version(path: Path, version: int) -> None:
    """Label the ledger `version`, without the columns later versions added to a table it
    had (version 5's tables may stay below it: daemons of 4 wrote them too)."""
    with closing(sqlite3.connect(path)) as conn, conn:
        for table, added_in, column in (
            ("leases", 5, "on_revoke"),
            ("leases", 7, "follow_work"),
            ("lease_gpus", 9, "cap_mw"),
        ):
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if version < added_in and column in columns:
                conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
    conn.close()


def test_an_upgrade_from_the_last_version_keeps_every_lease(tmp_path: Path) -> None:
    """A ledger of version 4 as its migrations made it, with an active lease and an ended
    one, opens as the current version: both leases and their history as they were, the
    active one still holding its GPU, the tables of version 5 there (empty), and the running
    totals of version 6 built from the leases (ben's 19 seconds of one GPU)."""
    path = _at_version(tmp_path / "v4.db", 4)
    with closing(sqlite3.connect(path)) as conn, conn:
        for uuid, index in GPU_ROWS:
            conn.execute(
                "INSERT INTO gpus (uuid, gpu_index, name, present, first_seen, last_seen) "
                "VALUES (?, ?, 'GPU', 1, 0, 0)",
                (uuid, index),
            )
        conn.executescript(
            "INSERT INTO leases (id, owner_uid, owner_name, pid, label, policy, created_at, "
            "expires_at, state, ended_at) VALUES "
            "('held', 1000, 'ana', 42, 'job', 'simple', 1.0, 99999.0, 'active', NULL), "
            "('done', 1001, 'ben', 43, NULL, 'simple', 1.0, 50.0, 'freed', 20.0);"
            "INSERT INTO lease_gpus (lease_id, gpu_uuid, gpu_index, position, active, gpu_of) "
            "VALUES ('held', 'GPU-0', 0, 0, 1, 'GPU-0'), ('done', 'GPU-1', 1, 0, 0, 'GPU-1');"
            "INSERT INTO history (lease_id, event, actor_uid, at) VALUES "
            "('held', 'granted', 1000, 1.0), ('done', 'granted', 1001, 1.0), "
            "('done', 'freed', 1001, 20.0);"
        )
    conn.close()
    ledger = Ledger(path)
    try:
        assert ledger.schema_version() == schema.SCHEMA_VERSION
        (held,) = ledger.active_leases()
        assert (held.id, held.owner_name, held.uuids) == ("held", "ana", ("GPU-0",))
        done = ledger.lease("done")
        assert done is not None and done.state is LeaseState.FREED and done.ended_at == 20.0
        assert [e.event.value for e in ledger.events_after("done", 0)] == ["granted", "freed"]
        assert ledger.pending_cleanups() == [] and ledger.power_caps() == []
        bens = ledger.totals_at(1001, 30.0)
        assert (bens.leases, bens.gpu_seconds) == (1, 19.0)
    finally:
        ledger.close()
    with closing(sqlite3.connect(path)) as conn, conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert set(TABLES_OF_5) <= names


def test_an_upgrade_of_a_ledger_labelled_4_with_the_new_tables_keeps_their_rows(
    tmp_path: Path,
) -> None:
    """The daemons before version 5 wrote its tables under version 4: such a ledger opens
    as the current version with every lease, request id, cleanup owed and power cap to put
    back (an active lease's cap on its unit since version 9)."""
    path = tmp_path / "unbumped.db"
    ledger = Ledger(path)
    ledger.sync_gpus([], 0.0)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "INSERT INTO gpus (uuid, gpu_index, name, present, first_seen, last_seen) "
            "VALUES (?, ?, 'GPU', 1, 0, 0)",
            GPU_ROWS,
        )
    conn.close()
    ledger.grant(_lease("aaaaaaaaaaaa", 0), 1000, request_id="retry-1")
    ledger.grant(_lease("bbbbbbbbbbbb", 1, 1001), 1001)
    ledger.add_cleanups([Cleanup("device-acl", "/dev/nvidia0", {"uid": 1000})], 5.0)
    gone = PowerCap("GPU-2", "cccccccccccc", 250_000, 300_000)  # of a lease that ended
    ledger.record_caps([PowerCap("GPU-1", "bbbbbbbbbbbb", 200_000, 300_000), gone])
    ledger.close()
    _set_version(path, 4)
    ledger = Ledger(path)
    try:
        assert ledger.schema_version() == schema.SCHEMA_VERSION
        assert [lease.id for lease in ledger.active_leases()] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
        assert ledger.active_request_ids() == {(1000, "retry-1"): "aaaaaaaaaaaa"}
        assert [c.cleanup.target for c in ledger.pending_cleanups()] == ["/dev/nvidia0"]
        held = PowerCap("GPU-1", "bbbbbbbbbbbb", 200_000, 300_000)  # now on its unit
        assert ledger.power_caps() == [held, gone]
    finally:
        ledger.close()


def test_the_daemon_backs_up_before_an_upgrade_and_refuses_a_newer_ledger_in_one_line(
    process_daemon: Callable[..., ProcessDaemon], paths: DaemonPaths
) -> None:
    """A version-4 ledger: the daemon takes a backup first (named for the versions, version 4
    inside), says where, and serves every lease. Rolled back over a ledger a newer daemon
    upgraded to the next version, it exits 65 with one line naming that version, the versions
    it reads and the backup taken before that upgrade; `--recover` refuses it the same way,
    changing nothing."""
    daemon = process_daemon(inventory="example:dgx1-volta", ledger_backups=2)
    with daemon.client() as client:
        held = {client.allocate(1).id, client.allocate(2).id}
    assert daemon.stop() == 0
    ledger = paths.state_dir / "ledger.sqlite3"
    _set_version(ledger, 4)
    upgraded = process_daemon(inventory="example:dgx1-volta", ledger_backups=2, initialise=False)
    with upgraded.client() as client:
        assert {lease.id for lease in client.leases()} == held
    now, newer = schema.SCHEMA_VERSION, schema.SCHEMA_VERSION + 1
    (before,) = (paths.state_dir / "backups").glob(f"upgrade-from-v4-to-v{now}-*.sqlite3")
    with closing(sqlite3.connect(f"file:{before}?mode=ro", uri=True)) as conn, conn:
        assert conn.execute("SELECT value FROM meta").fetchone() == ("4",)
    conn.close()
    assert str(before) in upgraded.stderr()
    assert upgraded.stop() == 0

    way_back = (
        paths.state_dir
        / "backups"
        / f"upgrade-from-v{now}-to-v{newer}-20991231T000000.000000Z.sqlite3"
    )
    shutil.copyfile(ledger, way_back)  # what the newer daemon took before its upgrade
    _set_version(ledger, newer)
    code, printed = start_refused(upgraded)
    assert code == 65, printed
    (line,) = printed.strip().splitlines()
    assert f"schema version {newer}" in line and f"reads versions up to {now}" in line, line
    assert str(way_back) in line and "docs/recovery.md" in line, line
    refused = recover(upgraded)
    assert refused.returncode == 65, refused.stderr
    assert str(way_back) in refused.stderr
    assert not (paths.state_dir / "recovery-pending").exists()
