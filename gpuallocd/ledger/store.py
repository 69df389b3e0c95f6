"""The durable ledger: one SQLite file, written by one thread, one transaction per change.

SQLite runs in WAL mode with `synchronous=FULL`: a commit returns only after the log is
on disk, so whatever the daemon acknowledged survives a crash of the daemon or the machine.
Every transaction starts with `BEGIN IMMEDIATE`, taking the write lock before reading.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from gpuallocd.errors import GpuBusy, LedgerError
from gpuallocd.leases import ENDING_EVENT, HistoryEvent, Lease, LeasedGpu, LeaseEvent, LeaseState
from gpuallocd.ledger import schema
from gpuallocd.model import Gpu

__all__ = ["Ledger"]

_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=FULL",
    "PRAGMA foreign_keys=ON",
    "PRAGMA busy_timeout=5000",
)


def _make_engine(path: Path) -> Engine:
    engine = create_engine(
        f"sqlite:///{path}",
        connect_args={"check_same_thread": False, "isolation_level": None},
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        for pragma in _PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class Ledger:
    """GPUs, leases and their history, in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._engine = _make_engine(path)
            with self._transaction() as conn:
                schema.metadata.create_all(conn)
                self._check_version(conn)
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot open the ledger {path}: {exc}") from None

    def close(self) -> None:
        self._engine.dispose()

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """One transaction; the commit is durable when the block returns."""
        with self._engine.connect() as conn, conn.begin():
            yield conn

    @staticmethod
    def _check_version(conn: Connection) -> None:
        row = conn.execute(select(schema.meta.c.value).where(schema.meta.c.key == "schema_version"))
        found = row.scalar_one_or_none()
        if found is None:
            conn.execute(
                insert(schema.meta).values(key="schema_version", value=str(schema.SCHEMA_VERSION))
            )
        elif int(found) > schema.SCHEMA_VERSION:
            raise LedgerError(
                f"the ledger was written by a newer gpuallocd (schema {found}, "
                f"this one reads up to {schema.SCHEMA_VERSION})"
            )

    def schema_version(self) -> int:
        with self._engine.connect() as conn:
            value = conn.execute(
                select(schema.meta.c.value).where(schema.meta.c.key == "schema_version")
            ).scalar_one()
        return int(value)

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
                    conn.execute(
                        update(schema.gpus).where(schema.gpus.c.uuid == gpu.uuid).values(**values)
                    )
                else:
                    conn.execute(
                        insert(schema.gpus).values(uuid=gpu.uuid, first_seen=now, **values)
                    )

    # Leases ---------------------------------------------------------------------------------

    def grant(self, lease: Lease, actor_uid: int) -> None:
        """Record a new active lease; GpuBusy if any of its GPUs is in another active lease."""
        try:
            with self._transaction() as conn:
                conn.execute(insert(schema.leases).values(**_lease_row(lease)))
                conn.execute(
                    insert(schema.lease_gpus),
                    [
                        {
                            "lease_id": lease.id,
                            "gpu_uuid": g.uuid,
                            "gpu_index": g.index,
                            "position": i,
                            "active": True,
                        }
                        for i, g in enumerate(lease.gpus)
                    ],
                )
                _record(conn, lease.id, LeaseEvent.GRANTED, actor_uid, lease.created_at, None)
        except IntegrityError:
            raise GpuBusy(
                "a GPU of this request is already leased", gpus=list(lease.uuids)
            ) from None
        except SQLAlchemyError as exc:
            raise LedgerError(f"the ledger refused the grant: {exc}") from None

    def renew(self, lease_id: str, expires_at: float, actor_uid: int, now: float) -> None:
        with self._write() as conn:
            conn.execute(
                update(schema.leases)
                .where(schema.leases.c.id == lease_id)
                .values(expires_at=expires_at)
            )
            _record(conn, lease_id, LeaseEvent.RENEWED, actor_uid, now, None)

    def end(self, leases: Sequence[Lease], actor_uid: int, detail: str | None = None) -> None:
        """Record leases as ended (freed, expired or revoked), their GPUs free again."""
        if not leases:
            return
        with self._write() as conn:
            for lease in leases:
                conn.execute(
                    update(schema.leases)
                    .where(schema.leases.c.id == lease.id)
                    .values(state=lease.state.value, ended_at=lease.ended_at)
                )
                conn.execute(
                    update(schema.lease_gpus)
                    .where(schema.lease_gpus.c.lease_id == lease.id)
                    .values(active=False)
                )
                event_at = lease.ended_at if lease.ended_at is not None else lease.expires_at
                _record(conn, lease.id, ENDING_EVENT[lease.state], actor_uid, event_at, detail)

    def active_leases(self) -> list[Lease]:
        return self._leases(schema.leases.c.state == LeaseState.ACTIVE.value)

    def lease(self, lease_id: str) -> Lease | None:
        found = self._leases(schema.leases.c.id == lease_id)
        return found[0] if found else None

    def recent_ended(self, limit: int) -> list[Lease]:
        query_filter = schema.leases.c.state != LeaseState.ACTIVE.value
        return self._leases(query_filter, order=schema.leases.c.ended_at.desc(), limit=limit)

    def history(self, lease_id: str | None = None, limit: int = 100) -> list[HistoryEvent]:
        query = select(schema.history).order_by(schema.history.c.seq.desc()).limit(limit)
        if lease_id is not None:
            query = query.where(schema.history.c.lease_id == lease_id)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            HistoryEvent(
                seq=r["seq"],
                lease_id=r["lease_id"],
                event=LeaseEvent(r["event"]),
                actor_uid=r["actor_uid"],
                at=r["at"],
                detail=r["detail"],
            )
            for r in reversed(rows)
        ]

    # Internals ------------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        try:
            with self._transaction() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"the ledger write failed: {exc}") from None

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self._engine.connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"the ledger read failed: {exc}") from None

    def _leases(self, where: Any, order: Any = None, limit: int | None = None) -> list[Lease]:
        query = (
            select(schema.leases)
            .where(where)
            .order_by(order if order is not None else schema.leases.c.created_at)
        )
        if limit is not None:
            query = query.limit(limit)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
            ids = [r["id"] for r in rows]
            gpu_rows = (
                conn.execute(
                    select(schema.lease_gpus)
                    .where(schema.lease_gpus.c.lease_id.in_(ids))
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
    }


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
        insert(schema.history).values(
            lease_id=lease_id, event=event_kind.value, actor_uid=actor_uid, at=at, detail=detail
        )
    )
