"""The durable ledger: one SQLite file, one connection, written in transactions.

Only the allocator writes it, from the event loop thread through the serial worker
(`allocator/worker.py`). sqlite3's `check_same_thread` is off: the one-writer rule is
kept by that worker, not by the driver.

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
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
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
from gpuallocd.ledger.admin_records import AdminRecords
from gpuallocd.ledger.cleanup_records import CleanupPlan, CleanupRecords, cleanup_steps
from gpuallocd.ledger.energy_records import EnergyRecords
from gpuallocd.ledger.hot import HotWriter, Step, end_steps, end_time, grant_steps
from gpuallocd.ledger.migrations import migrate
from gpuallocd.ledger.notice_records import NoticeRecords, notice_steps
from gpuallocd.ledger.power_records import PowerRecords
from gpuallocd.ledger.preemption_records import PreemptionRecords, terms_from_row, terms_steps
from gpuallocd.ledger.reader import LedgerReader
from gpuallocd.ledger.reservation_records import ReservationRecords
from gpuallocd.ledger.rows import (
    event_from_row,
    lease_from_row,
    leased_gpu_from_row,
    unit_rows,
)
from gpuallocd.ledger.totals import ended, granted
from gpuallocd.ledger.totals_records import TotalsRecords
from gpuallocd.ledger.unleased_records import UnleasedRecords
from gpuallocd.ledger.usage_records import UsageRecords
from gpuallocd.model import Gpu
from gpuallocd.model.lease import (
    ENDINGS,
    HistoryEvent,
    Lease,
    LeasedGpu,
    LeaseEvent,
    LeaseState,
)
from gpuallocd.model.notice import end_notice, granted_notice

__all__ = ["Ledger"]

_PRAGMAS = (
    # A new ledger gets 1 KiB pages: a grant or an end dirties about 11 pages (the rows
    # and their indexes), so each commit syncs 11 KiB of write-ahead log instead of 44 KiB
    # (about 20% off a durable commit). An existing ledger keeps its page size.
    "PRAGMA page_size=1024",
    "PRAGMA journal_mode=WAL",
    # Checkpoint the write-ahead log every 10,000 pages (at most ~10 MiB) rather than every
    # 1,000: a checkpoint syncs the database inside the commit that reaches the mark, and
    # copies about the same hot pages however rarely it runs, so a tenth as many of them
    # takes most of those stalls out of the requests' p99 (2.5 ms -> 0.6-1.1 ms a commit).
    "PRAGMA wal_autocheckpoint=10000",
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


class Ledger(
    AdminRecords,
    UsageRecords,
    ReservationRecords,
    UnleasedRecords,
    CleanupRecords,
    EnergyRecords,
    PowerRecords,
    NoticeRecords,
    PreemptionRecords,
    TotalsRecords,
):
    """GPUs, leases and their history, in one SQLite file (drains, admin actions, accounting
    reads, advance reservations, unleased use, pending cleanups, energy, power caps, the
    notices' feed, preemptions and the users' running totals in the base classes).

    `cleanup_plans` say what each ended lease owes the machine (one plan per feature that
    needs cleaning up after a lease: device ACLs); it is recorded in the transaction that
    ends the lease (cleanup_records.py).
    """

    cleanup_plans: tuple[CleanupPlan, ...] = ()

    def __init__(
        self,
        path: Path,
        *,
        sync: str = "full",
        commit_timer: Callable[[float], None] | None = None,
    ) -> None:
        """`commit_timer`, when given, is told how long each COMMIT took, in seconds."""
        if sync not in SYNC_MODES:
            raise LedgerError(f"ledger_sync must be one of {', '.join(SYNC_MODES)}, not {sync!r}")
        self.path = path
        self._batch: Connection | None = None
        self._commit_timer = commit_timer or _ignore
        try:
            self._engine = _make_engine(path, sync)
            # One writer, one connection: kept open for the ledger's whole life.
            self._conn = self._engine.connect()
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot open the ledger {path}: {exc}") from exc
        try:
            with self._conn.begin():
                _prepare_schema(self._conn)
            # grant and end go straight to the sqlite3 connection under self._conn
            driver = cast(sqlite3.Connection, self._conn.connection.driver_connection)
            self._hot = HotWriter(driver, self._commit_timer)
        except BaseException as exc:
            self._conn.close()  # a ledger refused (a newer schema, damage) keeps no handle open
            self._engine.dispose()
            if isinstance(exc, SQLAlchemyError):
                raise LedgerError(f"cannot open the ledger {path}: {exc}") from exc
            raise

    def close(self) -> None:
        """Close the ledger's connection; a second close does nothing."""
        if self._conn.closed:
            return
        self._hot.close()
        self._conn.close()
        self._engine.dispose()

    def reader(self) -> LedgerReader:
        """A read-only connection of its own to this ledger, for long reads off the writer's
        path (history, accounting)."""
        return LedgerReader(self.path)

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
                committing = time.perf_counter()
            self._commit_timer(time.perf_counter() - committing)
        except SQLAlchemyError as exc:
            raise LedgerError(f"the ledger commit failed: {exc}") from exc

    # GPUs -----------------------------------------------------------------------------------

    def sync_gpus(
        self, gpus: Sequence[Gpu], now: float, share_capacity: Mapping[str, int] | None = None
    ) -> None:
        """Record the node's GPUs and MIG instances; those no longer present are kept, marked
        absent. `share_capacity` is the memory the shares of each shared GPU may sum to."""
        with self._write() as conn:
            conn.execute(update(schema.gpus).values(present=False))
            known = set(conn.execute(select(schema.gpus.c.uuid)).scalars())
            for row in unit_rows(gpus, share_capacity or {}):
                uuid = row.pop("uuid")
                values = {**row, "present": True, "last_seen": now}
                if uuid in known:
                    where = schema.gpus.c.uuid == uuid
                    conn.execute(update(schema.gpus).where(where).values(**values))
                else:
                    conn.execute(insert(schema.gpus).values(uuid=uuid, first_seen=now, **values))

    # Leases ---------------------------------------------------------------------------------

    def grant(
        self,
        lease: Lease,
        actor_uid: int,
        request_id: str | None = None,
        also: Sequence[Step] = (),
        caps: Mapping[str, int] | None = None,
    ) -> None:
        """Record a new active lease (and the client's request id, if given), added to its
        owner's running totals; GpuBusy if any of its GPUs is in another active lease. A grant
        after a wait is told to its owner (the notices' feed) in the same transaction, with
        the rows of `also` (what its power caps owe back). `caps`: each capped GPU's cap in
        mW, recorded on its unit."""
        steps = grant_steps(lease, actor_uid, request_id, caps) + terms_steps(lease)
        steps += self._total_steps([granted(lease)]) + notice_steps([granted_notice(lease)])
        steps += also
        try:
            self._hot.write(steps, nested=self._batch is not None)
        except sqlite3.IntegrityError as exc:
            raise GpuBusy(
                f"a GPU of this request is already leased ({_constraint(exc)})",
                gpus=list(lease.uuids),
            ) from exc
        except sqlite3.Error as exc:
            raise LedgerError(f"the ledger refused the grant: {exc}") from exc

    def renew(self, lease_id: str, expires_at: float, actor_uid: int, now: float) -> None:
        with self._write() as conn:
            conn.execute(_SET_EXPIRY, {"of_lease": lease_id, "new_expires_at": expires_at})
            _record(conn, lease_id, LeaseEvent.RENEWED, actor_uid, now, None)

    def end(
        self,
        leases: Sequence[Lease],
        actor_uid: int,
        detail: str | None = None,
        also: Sequence[Step] = (),
    ) -> None:
        """Record leases as ended (freed, expired or revoked), their GPUs free again, and
        their ends in their owners' running totals; an end the owner did not ask for is told
        to them (the notices' feed), in the same transaction, with what the end owes and the
        rows of `also` (the power caps' records it closes)."""
        if not leases:
            return
        totals = self._total_steps([ended(lease, end_time(lease)) for lease in leases])
        cleanups = cleanup_steps(leases, self.cleanup_plans)
        told = notice_steps(end_notice(lease, actor_uid, detail) for lease in leases)
        self._hot_write([*end_steps(leases, actor_uid, detail), *totals, *cleanups, *told, *also])

    def _hot_write(self, steps: Sequence[tuple[str, Sequence[Any]]]) -> None:
        try:
            self._hot.write(steps, nested=self._batch is not None)
        except sqlite3.Error as exc:
            raise LedgerError(f"the ledger write failed: {exc}") from exc

    def note(self, lease_id: str, event_kind: LeaseEvent, at: float, detail: str) -> None:
        """Record an event that changes no lease (a memory share found over its size)."""
        with self._write() as conn:
            _record(conn, lease_id, event_kind, 0, at, detail)

    def active_leases(self) -> list[Lease]:
        return self._leases(schema.leases.c.state == LeaseState.ACTIVE.value)

    def active_request_ids(self) -> dict[tuple[int, str], str]:
        """The lease of each (owner uid, request id) recorded for an active lease."""
        active = select(schema.leases.c.id).where(schema.leases.c.state == LeaseState.ACTIVE.value)
        query = select(schema.lease_requests).where(schema.lease_requests.c.lease_id.in_(active))
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return {(r["owner_uid"], r["request_id"]): r["lease_id"] for r in rows}

    def lease(self, lease_id: str) -> Lease | None:
        found = self._leases(schema.leases.c.id == lease_id)
        return found[0] if found else None

    def events_after(self, lease_id: str, after: int) -> list[HistoryEvent]:
        """The lease's history events recorded after event number `after`, oldest first."""
        query = (
            select(schema.history)
            .where(schema.history.c.lease_id == lease_id, schema.history.c.seq > after)
            .order_by(schema.history.c.seq)
        )
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        events = [event_from_row(r) for r in rows]
        if any(e.event.value in ENDINGS for e in events):  # the end carries what it drew
            energy = self.lease_energy(lease_id)
            events = [replace(e, energy=energy) if e.event.value in ENDINGS else e for e in events]
        return events

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
            committing = time.perf_counter()
        self._commit_timer(time.perf_counter() - committing)

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
            terms_rows = (
                conn.execute(
                    select(schema.preemptible_leases).where(
                        schema.preemptible_leases.c.lease_id.in_([r["id"] for r in rows])
                    )
                )
                .mappings()
                .all()
            )
        gpus_by_lease: dict[str, list[LeasedGpu]] = {}
        for g in gpu_rows:
            gpus_by_lease.setdefault(g["lease_id"], []).append(leased_gpu_from_row(g))
        terms = {t["lease_id"]: terms_from_row(t) for t in terms_rows}
        return [
            lease_from_row(r, tuple(gpus_by_lease.get(r["id"], ())), terms.get(r["id"]))
            for r in rows
        ]


def _ignore(seconds: float) -> None:
    return None


def _prepare_schema(conn: Connection) -> None:
    """Create a new ledger, or bring an older one up to this version."""
    if not inspect(conn).has_table("meta"):
        schema.metadata.create_all(conn)
        for trigger in schema.UNIT_TRIGGERS:
            conn.exec_driver_sql(trigger)
        conn.execute(
            insert(schema.meta).values(key="schema_version", value=str(schema.SCHEMA_VERSION))
        )
        return
    found = int(conn.execute(_VERSION).scalar_one())
    if found > schema.SCHEMA_VERSION:
        raise LedgerError(
            f"the ledger has schema version {found}, written by a newer gpuallocd; this one "
            f"reads versions up to {schema.SCHEMA_VERSION}"
        )
    migrate(conn, found, schema.SCHEMA_VERSION)  # the one way a ledger's schema changes


def _constraint(exc: sqlite3.IntegrityError) -> str:
    """What SQLite refused, in its words (the index or the trigger's message)."""
    text = str(exc)
    return "unit in another active lease" if "UNIQUE" in text else text


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
