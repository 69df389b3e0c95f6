"""The ledger's invariants for MIG instances and memory shares, held by SQLite itself."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from gpuallocd.errors import GpuBusy
from gpuallocd.ledger import Ledger, schema
from gpuallocd.model import Gpu, Lease, LeasedGpu, LeaseState, MigDevice, UnitKind

GIB = 2**30
MIG = MigDevice(uuid="MIG-a", profile="1g.10gb", memory_total_bytes=10 * GIB)
GPUS = [
    Gpu(uuid="GPU-0", index=0, memory_total_bytes=80 * GIB),
    Gpu(uuid="GPU-1", index=1, memory_total_bytes=80 * GIB, mig_mode=True, mig_devices=(MIG,)),
]
CAPACITY = {"GPU-0": 79 * GIB}


def lease_of(lease_id: str, *units: LeasedGpu) -> Lease:
    return Lease(
        id=lease_id,
        gpus=units,
        owner_uid=1000,
        owner_name="ana",
        pid=42,
        label=None,
        policy="best-fit",
        created_at=1.0,
        expires_at=61.0,
    )


def share(gib: int) -> LeasedGpu:
    return LeasedGpu("GPU-0", 0, kind=UnitKind.SHARE, memory_bytes=gib * GIB, fraction=gib / 80)


WHOLE_0 = LeasedGpu("GPU-0", 0)
INSTANCE = LeasedGpu("MIG-a", 1, kind=UnitKind.MIG, parent="GPU-1", profile="1g.10gb")


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ledger.sync_gpus(GPUS, 0.0, CAPACITY)
    yield ledger
    ledger.close()


def test_shares_are_granted_while_they_fit_and_refused_beyond(ledger: Ledger) -> None:
    """40 + 39 GiB fit in 79 GiB of shareable memory; one more byte does not."""
    ledger.grant(lease_of("a", share(40)), 0)
    ledger.grant(lease_of("b", share(39)), 0)
    one_byte = LeasedGpu("GPU-0", 0, kind=UnitKind.SHARE, memory_bytes=1)
    with pytest.raises(GpuBusy, match="shareable memory"):
        ledger.grant(lease_of("c", one_byte), 0)
    assert ledger.lease("c") is None


def test_raw_sql_cannot_over_commit_a_gpu(ledger: Ledger) -> None:
    """The trigger refuses a share row past the GPU's capacity, bypassing Python entirely."""
    ledger.grant(lease_of("a", share(70)), 0)
    with closing(sqlite3.connect(ledger.path)) as conn, conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO lease_gpus (lease_id, gpu_uuid, gpu_index, position, active, kind, "
            f"gpu_of, memory_bytes) VALUES ('a', 'GPU-0', 0, 1, 1, 'share', 'GPU-0', {10 * GIB})"
        )


def test_a_gpu_that_is_not_shared_takes_no_share_even_in_raw_sql(ledger: Ledger) -> None:
    """No share_capacity_bytes (GPU-1 is not shared) means no share, whatever its size."""
    ledger.grant(lease_of("a", WHOLE_0), 0)
    with closing(sqlite3.connect(ledger.path)) as conn, conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute(
            "INSERT INTO lease_gpus (lease_id, gpu_uuid, gpu_index, position, active, kind, "
            "gpu_of, memory_bytes) VALUES ('a', 'GPU-1', 1, 1, 1, 'share', 'GPU-1', 1)"
        )


def test_whole_gpu_and_shares_never_overlap(ledger: Ledger) -> None:
    """A share refuses a GPU leased whole, and a whole lease a GPU holding a share."""
    ledger.grant(lease_of("whole", WHOLE_0), 0)
    with pytest.raises(GpuBusy, match="leased whole"):
        ledger.grant(lease_of("s", share(1)), 0)
    ledger.end([lease_of("whole", WHOLE_0).ended(LeaseState.FREED, 2.0)], 0)
    ledger.grant(lease_of("s", share(1)), 0)
    with pytest.raises(GpuBusy, match="partly leased"):
        ledger.grant(lease_of("whole2", WHOLE_0), 0)


def test_an_instance_is_leased_once_and_its_gpu_not_whole(ledger: Ledger) -> None:
    """One active lease per MIG instance; its parent GPU cannot be leased whole meanwhile."""
    ledger.grant(lease_of("m", INSTANCE), 0)
    with pytest.raises(GpuBusy, match="another active lease"):
        ledger.grant(lease_of("m2", INSTANCE), 0)
    with pytest.raises(GpuBusy, match="partly leased"):
        ledger.grant(lease_of("w", LeasedGpu("GPU-1", 1)), 0)


def test_an_ended_unit_cannot_be_made_active_again(ledger: Ledger) -> None:
    """Reactivating an ended row would skip the checks at insert: the schema forbids it."""
    lease = lease_of("a", share(60))
    ledger.grant(lease, 0)
    ledger.end([lease.ended(LeaseState.FREED, 2.0)], 0)
    ledger.grant(lease_of("b", share(60)), 0)
    with closing(sqlite3.connect(ledger.path)) as conn, conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE lease_gpus SET active = 1 WHERE lease_id = 'a'")


def test_units_come_back_from_the_ledger_as_granted(ledger: Ledger, tmp_path: Path) -> None:
    """Kind, parent, share size, profile and fraction survive a reopen."""
    ledger.grant(lease_of("s", share(20)), 0)
    ledger.grant(lease_of("m", INSTANCE), 0)
    ledger.close()
    reopened = Ledger(tmp_path / "ledger.sqlite3")
    units = {lease.id: lease.gpus[0] for lease in reopened.active_leases()}
    reopened.close()
    assert units == {"s": share(20), "m": INSTANCE}


SCHEMA_V2 = """
CREATE TABLE meta (key VARCHAR NOT NULL PRIMARY KEY, value VARCHAR NOT NULL);
CREATE TABLE gpus (uuid VARCHAR NOT NULL PRIMARY KEY, gpu_index INTEGER NOT NULL,
    name VARCHAR NOT NULL, present BOOLEAN NOT NULL, first_seen FLOAT NOT NULL,
    last_seen FLOAT NOT NULL);
CREATE TABLE leases (id VARCHAR NOT NULL PRIMARY KEY, owner_uid INTEGER NOT NULL,
    owner_name VARCHAR NOT NULL, pid INTEGER, label VARCHAR, policy VARCHAR NOT NULL,
    created_at FLOAT NOT NULL, expires_at FLOAT NOT NULL, state VARCHAR NOT NULL,
    ended_at FLOAT, bound BOOLEAN NOT NULL DEFAULT 0, pid_start_time INTEGER);
CREATE TABLE lease_gpus (lease_id VARCHAR NOT NULL REFERENCES leases (id),
    gpu_uuid VARCHAR NOT NULL REFERENCES gpus (uuid), gpu_index INTEGER NOT NULL,
    position INTEGER NOT NULL, active BOOLEAN NOT NULL, PRIMARY KEY (lease_id, gpu_uuid));
CREATE UNIQUE INDEX one_active_lease_per_gpu ON lease_gpus (gpu_uuid) WHERE active = 1;
CREATE TABLE history (seq INTEGER NOT NULL PRIMARY KEY, lease_id VARCHAR NOT NULL
    REFERENCES leases (id), event VARCHAR NOT NULL, actor_uid INTEGER NOT NULL,
    at FLOAT NOT NULL, detail TEXT);
INSERT INTO meta VALUES ('schema_version', '2');
INSERT INTO gpus VALUES ('GPU-0', 0, 'GPU 0', 1, 0.0, 0.0);
INSERT INTO leases VALUES ('old', 1000, 'ana', 42, 'v2', 'simple', 1.0, 99.0, 'active', NULL,
    1, 7);
INSERT INTO lease_gpus VALUES ('old', 'GPU-0', 0, 0, 1);
"""


def test_ledger_of_schema_2_is_upgraded_with_whole_gpu_leases(tmp_path: Path) -> None:
    """A schema-2 lease becomes a whole-GPU unit; the new invariants hold for it at once."""
    with closing(sqlite3.connect(tmp_path / "v2.db")) as conn, conn:
        conn.executescript(SCHEMA_V2)
    ledger = Ledger(tmp_path / "v2.db")
    assert ledger.schema_version() == schema.SCHEMA_VERSION
    (lease,) = ledger.active_leases()
    assert lease.gpus == (LeasedGpu("GPU-0", 0),)
    ledger.sync_gpus(GPUS, 1.0, CAPACITY)
    with pytest.raises(GpuBusy, match="leased whole"):
        ledger.grant(lease_of("s", share(1)), 0)
    ledger.close()
