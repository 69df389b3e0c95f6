"""The feed of notices (`notices`), each user's thresholds (`notify_settings`) and the last
delivery to each of their channels (`notify_reports`).

A notice is inserted with `INSERT OR IGNORE` on its unique (uid, key): writing the same fact
again (a restart, a second sample) adds nothing, and the writer learns whether it was new.
Notices caused by a grant or an end are steps of that transaction (`notice_steps`, on the hot
path's connection), so a lease never ends without its notice, nor the other way round.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Select, delete, func, insert, select, update

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.model.notice import Notice, NoticeKind

__all__ = [
    "INSERT_NOTICE",
    "NoticeRecords",
    "failing_channels_query",
    "notice_from_row",
    "notice_steps",
]

_SITE_CURSOR = "site_notices_delivered"

INSERT_NOTICE = (
    "INSERT OR IGNORE INTO notices (uid, user, kind, key, lease_id, at, title, body, data) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _values(notice: Notice) -> tuple[Any, ...]:
    return (
        notice.uid,
        notice.user,
        notice.kind.value,
        notice.key,
        notice.lease_id,
        notice.at,
        notice.title,
        notice.body,
        notice.data_text(),
    )


def notice_steps(notices: Iterable[Notice | None]) -> list[tuple[str, Sequence[Any]]]:
    """The hot path's steps that record `notices` (None: nothing to tell)."""
    return [(INSERT_NOTICE, _values(n)) for n in notices if n is not None]


def failing_channels_query() -> Select[Any]:
    """The channels whose last delivery failed, users' and the site's, for `doctor` and the
    dashboard: who, which channel and kind, failures in a row, the error, when it was tried
    and when it last arrived (the table holds no target and no secret)."""
    table = schema.notify_reports
    return (
        select(
            table.c.uid,
            table.c.channel,
            table.c.kind,
            table.c.failures,
            table.c.error,
            table.c.at,
            table.c.last_ok_at,
        )
        .where(table.c.ok.is_(False))
        .order_by(table.c.uid, table.c.channel)
    )


def notice_from_row(row: Any) -> Notice:
    return Notice(
        uid=row["uid"],
        user=row["user"],
        kind=NoticeKind(row["kind"]),
        key=row["key"],
        at=row["at"],
        title=row["title"],
        body=row["body"],
        lease_id=row["lease_id"],
        data=json.loads(row["data"]),
        seq=row["seq"],
    )


class NoticeRecords(LedgerAccess):
    """The feed, the thresholds and the delivery reports."""

    # The feed ---------------------------------------------------------------------------------

    def add_notices(self, notices: Sequence[Notice]) -> list[Notice]:
        """Record `notices`; the ones that were new, with their numbers (a key already in the
        feed adds nothing)."""
        added: list[Notice] = []
        with self._write() as conn:
            for notice in notices:
                done = conn.exec_driver_sql(INSERT_NOTICE, _values(notice))
                if done.rowcount:
                    added.append(_numbered(notice, int(done.lastrowid or 0)))
        return added

    def notices_after(self, uid: int | None, after: int, limit: int) -> list[Notice]:
        """Up to `limit` notices of `uid` (None: everyone's) numbered above `after`, oldest
        first (the index on (uid, seq) answers without a scan)."""
        table = schema.notices
        query = select(table).where(table.c.seq > after).order_by(table.c.seq).limit(limit)
        if uid is not None:
            query = query.where(table.c.uid == uid)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [notice_from_row(r) for r in rows]

    def last_notice_seq(self) -> int:
        """The highest number ever given (kept by AUTOINCREMENT across purges)."""
        with self._read() as conn:
            found = conn.exec_driver_sql(
                "SELECT seq FROM sqlite_sequence WHERE name = 'notices'"
            ).scalar()
        return int(found or 0)

    def purge_notices_before(self, cutoff: float, batch: int) -> int:
        """Delete up to `batch` notices older than `cutoff`; how many went."""
        table = schema.notices
        old = select(table.c.seq).where(table.c.at < cutoff).limit(batch).scalar_subquery()
        with self._write() as conn:
            done = conn.execute(delete(table).where(table.c.seq.in_(old)))
        return int(done.rowcount or 0)

    def site_cursor(self) -> int:
        """The last notice of the site's feed its channels were given (0: none yet)."""
        query = select(schema.meta.c.value).where(schema.meta.c.key == _SITE_CURSOR)
        with self._read() as conn:
            found = conn.execute(query).scalar()
        return int(found or 0)

    def set_site_cursor(self, seq: int) -> None:
        table = schema.meta
        with self._write() as conn:
            conn.execute(delete(table).where(table.c.key == _SITE_CURSOR))
            conn.execute(insert(table).values(key=_SITE_CURSOR, value=str(seq)))

    # What the notices are made of ---------------------------------------------------------------

    def last_renewals(self, lease_ids: Sequence[str]) -> dict[str, float]:
        """When each lease was last granted or renewed (its history, by the lease index)."""
        table = schema.history
        query = (
            select(table.c.lease_id, func.max(table.c.at))
            .where(table.c.lease_id.in_(list(lease_ids)))
            .where(table.c.event.in_(("granted", "renewed")))
            .group_by(table.c.lease_id)
        )
        with self._read() as conn:
            return {lease_id: float(at) for lease_id, at in conn.execute(query).all()}

    def unleased_after(self, seq: int) -> list[dict[str, Any]]:
        """Actions on unleased processes recorded after number `seq`, oldest first."""
        table = schema.unleased_use
        query = select(table).where(table.c.seq > seq).order_by(table.c.seq)
        with self._read() as conn:
            return [dict(row) for row in conn.execute(query).mappings().all()]

    def last_unleased_seq(self) -> int:
        table = schema.unleased_use
        with self._read() as conn:
            return int(conn.execute(select(func.max(table.c.seq))).scalar() or 0)

    # Thresholds -------------------------------------------------------------------------------

    def notify_thresholds(self) -> dict[int, tuple[float, ...]]:
        """Every user's thresholds who set some, in seconds, largest first."""
        table = schema.notify_settings
        with self._read() as conn:
            rows = conn.execute(select(table.c.uid, table.c.thresholds)).all()
        return {uid: tuple(float(t) for t in text.split(",") if t) for uid, text in rows}

    def set_notify_thresholds(self, uid: int, thresholds: Sequence[float], at: float) -> None:
        table = schema.notify_settings
        text = ",".join(f"{t:g}" for t in thresholds)
        with self._write() as conn:
            conn.execute(delete(table).where(table.c.uid == uid))
            conn.execute(insert(table).values(uid=uid, thresholds=text, updated_at=at))

    # Idle spells -----------------------------------------------------------------------------

    def idle_spells(self) -> dict[str, float]:
        """Each lease idle at the last sample, and since when (the name of its warnings)."""
        table = schema.idle_spells
        with self._read() as conn:
            return {row[0]: float(row[1]) for row in conn.execute(select(table))}

    def change_idle_spells(self, begun: dict[str, float], ended: Sequence[str]) -> None:
        """Spells that began (lease, since) and ended (leases busy again or gone)."""
        table = schema.idle_spells
        with self._write() as conn:
            if ended:
                conn.execute(delete(table).where(table.c.lease_id.in_(list(ended))))
            for lease_id, since in begun.items():
                conn.execute(insert(table).values(lease_id=lease_id, since=since))

    # Delivery reports -------------------------------------------------------------------------

    def record_delivery(
        self, uid: int, channel: str, kind: str, ok: bool, error: str | None, at: float
    ) -> None:
        """The result of the last delivery to one of `uid`'s channels."""
        table = schema.notify_reports
        where = (table.c.uid == uid) & (table.c.channel == channel)
        with self._write() as conn:
            failures = conn.execute(select(table.c.failures).where(where)).scalar()
            values: dict[str, Any] = {
                "kind": kind,
                "at": at,
                "ok": ok,
                "error": None if ok else error,
                "failures": 0 if ok else int(failures or 0) + 1,
            }
            if ok:
                values["last_ok_at"] = at
            if failures is None:
                conn.execute(insert(table).values(uid=uid, channel=channel, **values))
            else:
                conn.execute(update(table).where(where).values(**values))

    def delivery_reports(self, uid: int | None = None) -> list[dict[str, Any]]:
        """The last delivery of each channel (of `uid`, or everyone's)."""
        table = schema.notify_reports
        query = select(table).order_by(table.c.uid, table.c.channel)
        if uid is not None:
            query = query.where(table.c.uid == uid)
        with self._read() as conn:
            return [dict(row) for row in conn.execute(query).mappings().all()]

    def failing_channels(self) -> list[dict[str, Any]]:
        with self._read() as conn:
            return [dict(row) for row in conn.execute(failing_channels_query()).mappings()]

    def forget_channel(self, uid: int, channel: str) -> None:
        table = schema.notify_reports
        with self._write() as conn:
            conn.execute(delete(table).where((table.c.uid == uid) & (table.c.channel == channel)))


def _numbered(notice: Notice, seq: int) -> Notice:
    return Notice(
        notice.uid,
        notice.user,
        notice.kind,
        notice.key,
        notice.at,
        notice.title,
        notice.body,
        notice.lease_id,
        notice.data,
        seq,
    )
