"""The durable ledger: one SQLite file, written by one thread, in transactions.

SQLite runs in WAL mode with `synchronous=FULL` by default: a commit returns only after the
log is on disk, so whatever the daemon acknowledged survives a crash of the daemon or of the
machine. `sync="normal"` skips that fsync: acknowledged changes still survive a crash of the
daemon (kill -9), but the last ones may be lost when the machine itself loses power.
Every transaction starts with `BEGIN IMMEDIATE`, taking the write lock before reading.

Writes made inside `unit_of_work()` share one transaction (group commit: one fsync for
many requests); each write is its own savepoint in it, so a refused write leaves the others.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    create_engine,
    event,
    insert,
    inspect,
    select,
    update,
)
from sqlalchemy.exc import SQLAlchemyError

from gpuallocd.errors import GpuBusy, LedgerError
from gpuallocd.ledger import schema
from gpuallocd.ledger.hot import HotWriter, end_steps, grant_steps
from gpuallocd.ledger.migrations import migrate
from gpuallocd.model import Gpu
from gpuallocd.model.lease import (
    HistoryEvent,
    Lease,
    LeasedGpu,
    LeaseEvent,
    LeaseState,
)

__all__ = ["Ledger"]

_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA foreign_keys=ON",
    "PRAGMA busy_timeout=5000",
)
SYNC_MODES = ("full", "normal")

# Statements built once (grant and end, the hot path, are in `hot.py`).
_INSERT_EVENT = insert(schema.history)
_SET_EXPIRY = (
    update(schema.leases)
    .where(schema.leases.c.id == bindparam("of_lease"))
    .values(expires_at=bindparam("new_expires_at"))
)
_VERSION = select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")


def _make_engine(path: Path, sync: str) -> Engine:
    engine = create_engine(
        f"sqlite:///{path}",
        connect_args={"check_same_thread": False, "isolation_level": None},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        for pragma in _PRAGMAS:
            cursor.execute(pragma)
        cursor.execute(f"PRAGMA synchronous={sync.upper()}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class Ledger:
    """GPUs, leases and their history, in one SQLite file."""

    def __init__(self, path: Path, *, sync: str = "full") -> None:
        if sync not in SYNC_MODES:
            raise LedgerError(f"ledger_sync must be one of {', '.join(SYNC_MODES)}, not {sync!r}")
        self.path = path
        self._batch: Connection | None = None
        try:
            self._engine = _make_engine(path, sync)
            # One writer, one connection: kept open for the ledger's whole life.
            self._conn = self._engine.connect()
            with self._conn.begin():
                _prepare_schema(self._conn)
            # grant and end go straight to the sqlite3 connection under self._conn
            self._hot = HotWriter(cast(sqlite3.Connection, self._conn.connection.driver_connection))
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot open the ledger {path}: {exc}") from exc

    def close(self) -> None:
        self._hot.close()
        self._conn.close()
        self._engine.dispose()

    def schema_version(self) -> int:
        with self._read() as conn:
            return int(conn.execute(_VERSION).scalar_one())

    @contextmanager
    def unit_of_work(self) -> Iterator[None]:
        """Every write inside commits together when the block ends (group commit)."""
        if self._batch is not None:
            yield
            return
        try:
            with self._conn.begin():
                self._batch = self._conn
                try:
                    yield
                finally:
                    self._batch = None
        except SQLAlchemyError as exc:
            raise LedgerError(f"the ledger commit failed: {exc}") from exc

    # GPUs -----------------------------------------------------------------------------------

    def sync_gpus(self, gpus: Sequence[Gpu], now: float) -> None:
        """Record the node's GPUs; GPUs no longer present are kept, marked absent."""
        with self._write() as conn:
            conn.execute(update(schema.gpus).values(present=False))
            known = set(conn.execute(select(schema.gpus.c.uuid)).scalars())
            for gpu in gpus:
                values = {
                    "gpu_index": gpu.index,
                    "name": gpu.name,
                    "present": True,
                    "last_seen": now,
                }
                if gpu.uuid in known:
                    where = schema.gpus.c.uuid == gpu.uuid
                    conn.execute(update(schema.gpus).where(where).values(**values))
                else:
                    conn.execute(
                        insert(schema.gpus).values(uuid=gpu.uuid, first_seen=now, **values)
                    )

    # Leases ---------------------------------------------------------------------------------

    def grant(self, lease: Lease, actor_uid: int) -> None:
        """Record a new active lease; GpuBusy if any of its GPUs is in another active lease."""
        try:
            self._hot.write(grant_steps(lease, actor_uid), nested=self._batch is not None)
        except sqlite3.IntegrityError as exc:
            raise GpuBusy(
                "a GPU of this request is already leased", gpus=list(lease.uuids)
            ) from exc
        except sqlite3.Error as exc:
            raise LedgerError(f"the ledger refused the grant: {exc}") from exc

    def renew(self, lease_id: str, expires_at: float, actor_uid: int, now: float) -> None:
        with self._write() as conn:
            conn.execute(_SET_EXPIRY, {"of_lease": lease_id, "new_expires_at": expires_at})
            _record(conn, lease_id, LeaseEvent.RENEWED, actor_uid, now, None)

    def end(self, leases: Sequence[Lease], actor_uid: int, detail: str | None = None) -> None:
        """Record leases as ended (freed, expired or revoked), their GPUs free again."""
        if not leases:
            return
        try:
            self._hot.write(end_steps(leases, actor_uid, detail), nested=self._batch is not None)
        except sqlite3.Error as exc:
            raise LedgerError(f"the ledger write failed: {exc}") from exc

    def active_leases(self) -> list[Lease]:
        return self._leases(schema.leases.c.state == LeaseState.ACTIVE.value)

    def lease(self, lease_id: str) -> Lease | None:
        found = self._leases(schema.leases.c.id == lease_id)
        return found[0] if found else None

    def history(self, lease_id: str | None = None, limit: int = 100) -> list[HistoryEvent]:
        query = select(schema.history).order_by(schema.history.c.seq.desc()).limit(limit)
        if lease_id is not None:
            query = query.where(schema.history.c.lease_id == lease_id)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [_event_from_row(r) for r in reversed(rows)]

    # Internals ------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A savepoint in the current unit of work, else a transaction of its own."""
        if self._batch is not None:
            with self._batch.begin_nested():
                yield self._batch
            return
        with self._conn.begin():
            yield self._conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        try:
            with self._transaction() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"the ledger write failed: {exc}") from exc

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            yield self._conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"the ledger read failed: {exc}") from exc
        finally:
            if self._batch is None and self._conn.in_transaction():
                self._conn.rollback()  # end the read's implicit transaction

    def _leases(self, where: Any) -> list[Lease]:
        query = select(schema.leases).where(where).order_by(schema.leases.c.created_at)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
            gpu_rows = (
                conn.execute(
                    select(schema.lease_gpus)
                    .where(schema.lease_gpus.c.lease_id.in_([r["id"] for r in rows]))
                    .order_by(schema.lease_gpus.c.lease_id, schema.lease_gpus.c.position)
                )
                .mappings()
                .all()
            )
        gpus_by_lease: dict[str, list[LeasedGpu]] = {}
        for g in gpu_rows:
            gpus_by_lease.setdefault(g["lease_id"], []).append(
                LeasedGpu(g["gpu_uuid"], g["gpu_index"])
            )
        return [_lease_from_row(r, tuple(gpus_by_lease.get(r["id"], ()))) for r in rows]


def _prepare_schema(conn: Connection) -> None:
    """Create a new ledger, or bring an older one up to this version."""
    if not inspect(conn).has_table("meta"):
        schema.metadata.create_all(conn)
        conn.execute(
            insert(schema.meta).values(key="schema_version", value=str(schema.SCHEMA_VERSION))
        )
        return
    found = int(conn.execute(_VERSION).scalar_one())
    if found > schema.SCHEMA_VERSION:
        raise LedgerError(
            f"the ledger was written by a newer gpuallocd (schema {found}, "
            f"this one reads up to {schema.SCHEMA_VERSION})"
        )
    migrate(conn, found, schema.SCHEMA_VERSION)
    schema.metadata.create_all(conn)  # tables added since; existing ones are left alone


def _lease_row(lease: Lease) -> dict[str, Any]:
    return {
        "id": lease.id,
        "owner_uid": lease.owner_uid,
        "owner_name": lease.owner_name,
        "pid": lease.pid,
        "label": lease.label,
        "policy": lease.policy,
        "created_at": lease.created_at,
        "expires_at": lease.expires_at,
        "state": lease.state.value,
        "ended_at": lease.ended_at,
        "bound": lease.bound,
        "pid_start_time": lease.pid_start_time,
    }


def _lease_gpu_rows(lease: Lease) -> list[dict[str, Any]]:
    return [
        {
            "lease_id": lease.id,
            "gpu_uuid": g.uuid,
            "gpu_index": g.index,
            "position": i,
            "active": True,
        }
        for i, g in enumerate(lease.gpus)
    ]


def _lease_from_row(row: Any, gpus: tuple[LeasedGpu, ...]) -> Lease:
    return Lease(
        id=row["id"],
        gpus=gpus,
        owner_uid=row["owner_uid"],
        owner_name=row["owner_name"],
        pid=row["pid"],
        label=row["label"],
        policy=row["policy"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        state=LeaseState(row["state"]),
        ended_at=row["ended_at"],
        bound=bool(row["bound"]),
        pid_start_time=row["pid_start_time"],
    )


def _event_from_row(row: Any) -> HistoryEvent:
    return HistoryEvent(
        seq=row["seq"],
        lease_id=row["lease_id"],
        event=LeaseEvent(row["event"]),
        actor_uid=row["actor_uid"],
        at=row["at"],
        detail=row["detail"],
    )


def _record(
    conn: Connection,
    lease_id: str,
    event_kind: LeaseEvent,
    actor_uid: int,
    at: float,
    detail: str | None,
) -> None:
    conn.execute(
        _INSERT_EVENT,
        {
            "lease_id": lease_id,
            "event": event_kind.value,
            "actor_uid": actor_uid,
            "at": at,
            "detail": detail,
        },
    )
