"""Reads of the ledger on a connection of their own, for callers on other threads.

The `Ledger` keeps one connection, used by the allocator on the event loop. A reader that
must not wait for the loop, nor make the loop wait for it (a page of the dashboard reading
thirty days of leases), opens its own connection to the same file: WAL lets it read the last
committed state while the allocator writes. It never writes (`PRAGMA query_only`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine, create_engine, event, func, or_, select
from sqlalchemy.exc import SQLAlchemyError

from gpuallocd.errors import LedgerError
from gpuallocd.ledger import schema
from gpuallocd.ledger.rows import event_from_row
from gpuallocd.ledger.usage_records import UsageRecords
from gpuallocd.model import HistoryEvent

__all__ = ["GpuSpan", "LedgerReader"]

_L, _G = schema.leases, schema.lease_gpus


class GpuSpan(NamedTuple):
    """One lease on one physical GPU (a MIG instance or a share counts on its GPU)."""

    gpu_uuid: str
    owner_name: str
    label: str | None
    created_at: float
    ended_at: float | None


class LedgerReader(UsageRecords):
    """Read-only queries for any thread; the connection is opened at the first read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._engine: Engine | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    def history(self, limit: int) -> list[HistoryEvent]:
        """The last `limit` history events, oldest first."""
        query = select(schema.history).order_by(schema.history.c.seq.desc()).limit(limit)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [event_from_row(r) for r in reversed(rows)]

    def gpu_spans(self, since: float, until: float) -> list[GpuSpan]:
        """Each lease on each GPU held at some time inside [since, until)."""
        query = (
            select(
                func.coalesce(_G.c.gpu_of, _G.c.gpu_uuid),
                _L.c.owner_name,
                _L.c.label,
                _L.c.created_at,
                _L.c.ended_at,
            )
            .select_from(_G.join(_L, _L.c.id == _G.c.lease_id))
            .where(or_(_L.c.ended_at.is_(None), _L.c.ended_at > since), _L.c.created_at < until)
            .order_by(_L.c.created_at)
        )
        with self._read() as conn:
            return [GpuSpan(*row) for row in conn.execute(query).all()]

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self._connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"the ledger read failed: {exc}") from exc

    def _connect(self) -> Connection:
        with self._lock:
            if self._engine is None:
                self._engine = _read_engine(self.path)
        return self._engine.connect()


def _read_engine(path: Path) -> Engine:
    engine = create_engine(
        f"sqlite:///{path}", connect_args={"check_same_thread": False, "timeout": 5.0}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA query_only=ON")
        cursor.close()

    return engine
