"""A read-only connection of its own for the long reads: history and accounting.

The writer's connection belongs to the serial worker on the event loop; a read of thousands
of rows there would hold every other request behind it. These reads go through a second
connection, opened read-only (`mode=ro`: it can change nothing), from one thread of their
own. SQLite's write-ahead log lets it read a consistent snapshot while the writer commits,
and SQLite runs each query without holding Python's GIL; accounting adds up in SQL, so the
thread hands back a handful of rows, not one per lease.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

from sqlalchemy import Connection, create_engine, event, func, or_, select
from sqlalchemy.exc import SQLAlchemyError

from gpuallocd.errors import LedgerError
from gpuallocd.ledger import schema
from gpuallocd.ledger.notice_records import failing_channels_query
from gpuallocd.ledger.rows import event_from_row
from gpuallocd.ledger.totals_records import TotalsRecords
from gpuallocd.ledger.usage_records import UsageRecords
from gpuallocd.model import HistoryEvent, UserUsage
from gpuallocd.model.energy import LeaseEnergy
from gpuallocd.model.lease import ENDINGS

__all__ = ["GpuSpan", "LedgerReader"]

_ENDINGS_IN = str(tuple(sorted(ENDINGS)))  # as an SQL list: ('expired', 'freed', ...)
_PREEMPTIBLE_HOURS = (
    "SELECT l.owner_uid, total(max(min(coalesce(l.ended_at, :until), :until) "
    "- max(l.created_at, :since), 0) * (SELECT coalesce(sum(g.fraction), 0) "
    "FROM lease_gpus AS g WHERE g.lease_id = l.id)) "
    "FROM preemptible_leases AS t CROSS JOIN leases AS l ON l.id = t.lease_id "
    "WHERE (l.ended_at IS NULL OR l.ended_at > :since) AND l.created_at < :until "
    "GROUP BY l.owner_uid"
)
_L = schema.leases
_T = schema.preemptible_leases
_H = schema.history
_G = schema.lease_gpus


class GpuSpan(NamedTuple):
    """One lease on one physical GPU (a MIG instance or a share counts on its GPU)."""

    gpu_uuid: str
    owner_name: str
    label: str | None
    created_at: float
    ended_at: float | None


_HISTORY_JSON = """
WITH names(uid, name) AS ({names})
SELECT coalesce(json_group_array(json(event)), '[]') FROM (
  SELECT seq, json_object(
    'seq', seq, 'lease_id', lease_id, 'event', event,
    'actor', json_object('uid', actor_uid,
                         'user', coalesce(names.name, CAST(actor_uid AS TEXT))),
    'actor_uid', actor_uid,
    'at', json(printf('%!.17g', at)), 'detail', detail,
    'energy', CASE WHEN event IN {endings} THEN (
      SELECT CASE WHEN count(*) THEN json_object(
        'joules', json(printf('%!.17g', total(joules))),
        'kwh', json(printf('%!.17g', total(joules) / 3600000.0)),
        'estimate', json(CASE WHEN max(estimate) THEN 'true' ELSE 'false' END)) END
      FROM energy_use WHERE energy_use.lease_id = last.lease_id) END) AS event
  FROM (SELECT * FROM history {where} ORDER BY seq DESC LIMIT ?) AS last
  LEFT JOIN names ON names.uid = last.actor_uid
  ORDER BY seq
)
"""
_ACTORS = """
SELECT DISTINCT actor_uid FROM (SELECT actor_uid FROM history {where} ORDER BY seq DESC LIMIT ?)
"""


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """`path` opened read-only (a URI, its path quoted: no character of it is taken for a
    URI's query or fragment)."""
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    return sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)


class LedgerReader(UsageRecords, TotalsRecords):
    """History, accounting and the dashboard's reads over a read-only connection (one
    thread at a time: the API's reads and the dashboard each have their own reader);
    accounting from the users' running totals (totals_records.py)."""

    def __init__(self, path: Path) -> None:
        try:
            self._engine = create_engine(
                "sqlite://", creator=functools.partial(_connect_read_only, path)
            )

            @event.listens_for(self._engine, "connect")
            def _on_connect(dbapi_connection: Any, _record: Any) -> None:
                dbapi_connection.execute("PRAGMA busy_timeout=5000")

            self._conn = self._engine.connect()
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot open the ledger {path} for reading: {exc}") from exc

    def close(self) -> None:
        self._conn.close()
        self._engine.dispose()

    def history(self, lease_id: str | None = None, limit: int = 100) -> list[HistoryEvent]:
        """The last `limit` events (of one lease where given), oldest first."""
        query = select(_H).order_by(_H.c.seq.desc()).limit(limit)
        if lease_id is not None:
            query = query.where(_H.c.lease_id == lease_id)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
            ended = sorted({r["lease_id"] for r in rows if r["event"] in ENDINGS})
            energy = _energy_of(conn, ended)
        events = [event_from_row(r) for r in reversed(rows)]
        return [
            replace(e, energy=energy.get(e.lease_id)) if e.event.value in ENDINGS else e
            for e in events
        ]

    def history_json(
        self,
        lease_id: str | None = None,
        limit: int = 100,
        user_name: Callable[[int], str] = str,
    ) -> str:
        """`history` as a JSON array of `HistoryEvent.to_json(user_name(actor_uid))`
        objects, built by SQLite itself: the thread holds Python's lock only to look up the
        few actors' names and to hand the text over, not for every event (times are printed
        with 17 digits, so each reads back as the same float)."""
        where, params = ("WHERE lease_id = ?", (lease_id, limit)) if lease_id else ("", (limit,))
        with self._read() as conn:
            uids = conn.exec_driver_sql(_ACTORS.format(where=where), params).scalars().all()
            names = [(uid, user_name(uid)) for uid in uids]
            rows = " UNION ALL ".join("SELECT ?, ?" for _ in names) or "SELECT NULL, NULL WHERE 0"
            values = tuple(v for pair in names for v in pair)
            query = _HISTORY_JSON.format(names=rows, where=where, endings=_ENDINGS_IN)
            text = conn.exec_driver_sql(query, values + params).scalar_one()
        return str(text)

    def has_lease(self, lease_id: str) -> bool:
        with self._read() as conn:
            return conn.execute(select(_L.c.id).where(_L.c.id == lease_id)).first() is not None

    def usage(self, since: float, until: float) -> list[UserUsage]:
        """Each user's use inside [since, until] from their running totals (TotalsRecords),
        with the part held in preemptible leases beside it (`preemptible_hours`)."""
        found = super().usage(since, until)
        hours = self.preemptible_hours(since, until)
        return [replace(u, preemptible_gpu_hours=hours.get(u.uid, 0.0)) for u in found]

    def preemptible_hours(self, since: float, until: float) -> dict[int, float]:
        """GPU-hours each user held in preemptible leases inside [since, until]. It walks the
        preemptible leases only (their own table first, CROSS JOIN keeping SQLite to that
        order, each lease's row by its key), so a history of ordinary leases costs nothing."""
        with self._read() as conn:
            rows = conn.exec_driver_sql(_PREEMPTIBLE_HOURS, {"since": since, "until": until})
            return {uid: seconds / 3600.0 for uid, seconds in rows if seconds > 0}

    def energy_after(self, seq: int) -> tuple[dict[str, float], int]:
        """Joules per user in the energy readings after `seq`, and the last reading's seq."""
        e = schema.energy_use
        query = (
            select(e.c.owner_name, func.total(e.c.joules), func.max(e.c.seq))
            .where(e.c.seq > seq)
            .group_by(e.c.owner_name)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return {name: float(j) for name, j, _ in rows}, max((r[2] for r in rows), default=seq)

    def waiting_counts(self, since: float, bounds: Sequence[float]) -> list[tuple[str, int, int]]:
        """(user, bucket, count): how many leases granted since `since` (active or not)
        waited less than each of `bounds` (bucket `len(bounds)`: longer), counted in SQL over
        the leases that ended since then and the active ones, not the whole history."""
        bucket = " ".join(f"WHEN waited_seconds < ?{n + 2} THEN {n}" for n in range(len(bounds)))
        query = (
            f"SELECT owner_name, CASE {bucket} ELSE {len(bounds)} END AS bucket, count(*) "
            "FROM (SELECT owner_name, waited_seconds FROM leases "
            "WHERE ended_at >= ?1 AND created_at >= ?1 UNION ALL "
            "SELECT owner_name, waited_seconds FROM leases "
            "WHERE state = 'active' AND created_at >= ?1) GROUP BY owner_name, bucket"
        )
        with self._read() as conn:
            rows = conn.exec_driver_sql(query, (since, *bounds)).all()
        return [(str(user), int(index), int(count)) for user, index, count in rows]

    def gpu_spans(self, since: float, until: float) -> list[GpuSpan]:
        """Each lease on each GPU held at some time inside [since, until) (the dashboard's
        timeline)."""
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

    def failing_channels(self) -> list[dict[str, Any]]:
        """Notification channels whose last delivery failed (the dashboard's section)."""
        with self._read() as conn:
            return [dict(row) for row in conn.execute(failing_channels_query()).mappings()]

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            yield self._conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"the ledger read failed: {exc}") from exc
        finally:
            if self._conn.in_transaction():
                self._conn.rollback()  # end the read's snapshot


def _energy_of(conn: Connection, lease_ids: list[str]) -> dict[str, LeaseEnergy]:
    """The energy each of these leases drew, where any was read."""
    if not lease_ids:
        return {}
    e = schema.energy_use
    query = (
        select(e.c.lease_id, func.total(e.c.joules), func.max(e.c.estimate))
        .where(e.c.lease_id.in_(lease_ids))
        .group_by(e.c.lease_id)
    )
    return {row[0]: LeaseEnergy(float(row[1]), bool(row[2])) for row in conn.execute(query)}
