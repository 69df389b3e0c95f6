"""The ledger's invariants hold whatever sequence of changes it sees."""

from __future__ import annotations

import dataclasses
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuallocd.errors import GpuBusy, LedgerError
from gpuallocd.ledger import Ledger, LedgerReader, schema
from gpuallocd.model import Gpu, HistoryEvent, Lease, LeasedGpu, LeaseState

GPUS = [Gpu(uuid=f"GPU-{i}", index=i) for i in range(6)]


def make_lease(lease_id: str, indices: list[int], at: float = 1.0) -> Lease:
    return Lease(
        id=lease_id,
        gpus=tuple(LeasedGpu(GPUS[i].uuid, i) for i in indices),
        owner_uid=1000,
        owner_name="ana",
        pid=42,
        label=None,
        policy="simple",
        created_at=at,
        expires_at=at + 60,
    )


def history_of(ledger: Ledger, lease_id: str | None = None) -> list[HistoryEvent]:
    """The history as the daemon reads it: through the read-only reader."""
    reader = LedgerReader(ledger.path)
    try:
        return reader.history(lease_id)
    finally:
        reader.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ledger.sync_gpus(GPUS, 0.0)
    yield ledger
    ledger.close()


def test_schema_refuses_double_booking_even_in_raw_sql(ledger: Ledger) -> None:
    """The unique index refuses a second active row for a GPU, bypassing Python entirely."""
    ledger.grant(make_lease("a", [0]), 0)
    ledger.grant(make_lease("b", [1]), 0)
    with closing(sqlite3.connect(ledger.path)) as conn, conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO lease_gpus (lease_id, gpu_uuid, gpu_index, position, active) "
            "VALUES ('b', 'GPU-0', 0, 1, 1)"
        )


def test_grant_of_a_busy_gpu_is_gpu_busy_and_atomic(ledger: Ledger) -> None:
    """A refused grant leaves no trace: no lease row, no history event."""
    ledger.grant(make_lease("a", [0, 1]), 0)
    with pytest.raises(GpuBusy):
        ledger.grant(make_lease("b", [2, 1]), 0)
    assert ledger.lease("b") is None
    assert [e.lease_id for e in history_of(ledger)] == ["a"]
    ledger.grant(make_lease("c", [2]), 0)  # GPU 2 was not left half-booked


def test_ended_lease_frees_its_gpus(ledger: Ledger) -> None:
    """Once ended, a lease's GPUs may be granted again; its row keeps the final state."""
    lease = make_lease("a", [0])
    ledger.grant(lease, 0)
    ledger.end([lease.ended(LeaseState.FREED, 5.0)], 0)
    ledger.grant(make_lease("b", [0]), 0)
    assert ledger.lease("a") is not None and ledger.lease("a").state is LeaseState.FREED  # type: ignore[union-attr]


def test_ledger_reopens_with_its_leases(tmp_path: Path) -> None:
    """A reopened ledger has the same active leases and schema version."""
    first = Ledger(tmp_path / "l.db")
    first.sync_gpus(GPUS, 0.0)
    first.grant(make_lease("a", [3, 4]), 0)
    first.close()
    second = Ledger(tmp_path / "l.db")
    assert [x.id for x in second.active_leases()] == ["a"]
    assert second.active_leases()[0].gpus == make_lease("a", [3, 4]).gpus
    assert second.schema_version() == schema.SCHEMA_VERSION
    second.close()


def test_what_a_revoke_does_to_a_leases_processes_is_kept_in_the_ledger(tmp_path: Path) -> None:
    """A lease's `on_revoke` is read back from a reopened ledger (a restarted daemon still
    stops a `run` command on revoke); a lease of a ledger older than the column reads as
    "notify"."""
    first = Ledger(tmp_path / "l.db")
    first.sync_gpus(GPUS, 0.0)
    first.grant(dataclasses.replace(make_lease("run", [0]), on_revoke="terminate"), 0)
    first.grant(make_lease("lib", [1]), 0)
    first.close()
    second = Ledger(tmp_path / "l.db")
    assert {x.id: x.on_revoke for x in second.active_leases()} == {
        "run": "terminate",
        "lib": "notify",
    }
    second.close()
    with closing(sqlite3.connect(tmp_path / "v1.db")) as conn, conn:
        conn.executescript(SCHEMA_V1)
    conn.close()  # `with` commits; it does not close
    upgraded = Ledger(tmp_path / "v1.db")
    assert [x.on_revoke for x in upgraded.active_leases()] == ["notify"]
    upgraded.close()


def test_newer_ledger_is_refused(tmp_path: Path) -> None:
    """A ledger from a newer schema is refused with a message, not misread."""
    Ledger(tmp_path / "l.db").close()
    with closing(sqlite3.connect(tmp_path / "l.db")) as conn, conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(LedgerError, match="newer"):
        Ledger(tmp_path / "l.db")


def test_durability_settings() -> None:
    """WAL journal and synchronous=FULL are in force on the ledger's connections."""
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(Path(tmp) / "l.db")
        with ledger._engine.connect() as conn:  # the settings live on the connection
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        ledger.close()


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("grant"), st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True)
        ),
        st.tuples(st.just("end"), st.integers(0, 30)),
    ),
    max_size=30,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=operations)
def test_no_gpu_is_ever_in_two_active_leases(ops: list[tuple[str, object]]) -> None:
    """Any sequence of grants and ends: active leases are disjoint, every granted one recorded."""
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(Path(tmp) / "l.db")
        ledger.sync_gpus(GPUS, 0.0)
        model: dict[str, set[int]] = {}
        for n, (kind, arg) in enumerate(ops):
            if kind == "grant":
                indices = list(arg)  # type: ignore[call-overload]
                busy = set().union(*model.values()) if model else set()
                try:
                    ledger.grant(make_lease(f"l{n}", indices), 0)
                except GpuBusy:
                    assert busy & set(indices)
                else:
                    assert not busy & set(indices)
                    model[f"l{n}"] = set(indices)
            elif model:
                victim = sorted(model)[int(arg) % len(model)]  # type: ignore[call-overload]
                lease = ledger.lease(victim)
                assert lease is not None
                ledger.end([lease.ended(LeaseState.FREED, 2.0)], 0)
                del model[victim]
        active = ledger.active_leases()
        assert {x.id for x in active} == set(model)
        held = [g.uuid for x in active for g in x.gpus]
        assert len(held) == len(set(held))
        ledger.close()


SCHEMA_V1 = """
CREATE TABLE meta (key VARCHAR NOT NULL PRIMARY KEY, value VARCHAR NOT NULL);
CREATE TABLE gpus (uuid VARCHAR NOT NULL PRIMARY KEY, gpu_index INTEGER NOT NULL,
    name VARCHAR NOT NULL, present BOOLEAN NOT NULL, first_seen FLOAT NOT NULL,
    last_seen FLOAT NOT NULL);
CREATE TABLE leases (id VARCHAR NOT NULL PRIMARY KEY, owner_uid INTEGER NOT NULL,
    owner_name VARCHAR NOT NULL, pid INTEGER, label VARCHAR, policy VARCHAR NOT NULL,
    created_at FLOAT NOT NULL, expires_at FLOAT NOT NULL, state VARCHAR NOT NULL,
    ended_at FLOAT);
CREATE INDEX leases_by_state ON leases (state);
CREATE TABLE lease_gpus (lease_id VARCHAR NOT NULL REFERENCES leases (id),
    gpu_uuid VARCHAR NOT NULL REFERENCES gpus (uuid), gpu_index INTEGER NOT NULL,
    position INTEGER NOT NULL, active BOOLEAN NOT NULL, PRIMARY KEY (lease_id, gpu_uuid));
CREATE UNIQUE INDEX one_active_lease_per_gpu ON lease_gpus (gpu_uuid) WHERE active = 1;
CREATE TABLE history (seq INTEGER NOT NULL PRIMARY KEY, lease_id VARCHAR NOT NULL
    REFERENCES leases (id), event VARCHAR NOT NULL, actor_uid INTEGER NOT NULL,
    at FLOAT NOT NULL, detail TEXT);
INSERT INTO meta VALUES ('schema_version', '1');
INSERT INTO gpus VALUES ('GPU-0', 0, 'GPU 0', 1, 0.0, 0.0);
INSERT INTO leases VALUES ('old', 1000, 'ana', 42, 'v1', 'simple', 1.0, 99.0, 'active', NULL);
INSERT INTO lease_gpus VALUES ('old', 'GPU-0', 0, 0, 1);
INSERT INTO history VALUES (1, 'old', 'granted', 1000, 1.0, NULL);
"""


def test_ledger_of_schema_1_opens_and_is_upgraded(tmp_path: Path) -> None:
    """A ledger written by the first schema opens: upgraded, its leases and history intact."""
    with closing(sqlite3.connect(tmp_path / "v1.db")) as conn, conn:
        conn.executescript(SCHEMA_V1)
    ledger = Ledger(tmp_path / "v1.db")
    assert ledger.schema_version() == schema.SCHEMA_VERSION
    (lease,) = ledger.active_leases()
    assert (lease.id, lease.label, lease.bound, lease.pid_start_time) == ("old", "v1", False, None)
    assert [e.event.value for e in history_of(ledger, "old")] == ["granted"]
    with pytest.raises(GpuBusy):
        ledger.grant(make_lease("new", [0]), 0)  # the old lease still holds GPU-0
    ledger.close()
