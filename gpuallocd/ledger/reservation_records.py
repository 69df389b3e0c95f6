"""Advance reservations and their events, in the ledger (docs/scheduling.md)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, insert, select, update

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.model import AdvanceReservation, ReservationEvent, ReservationRecord

__all__ = ["ReservationRecords"]

_R = schema.advance_reservations
_E = schema.reservation_events


def _from_row(row: Any) -> AdvanceReservation:
    return AdvanceReservation(
        id=row["id"],
        gpus=tuple(u for u in row["gpus"].split(",") if u),
        start_at=row["start_at"],
        end_at=row["end_at"],
        user=row["user"],
        group=row["group"],
        reason=row["reason"],
        by_uid=row["by_uid"],
        by_user=row["by_user"],
        created_at=row["created_at"],
        cancelled_at=row["cancelled_at"],
    )


def _event(
    conn: Connection,
    reservation_id: str,
    event: ReservationEvent,
    actor_uid: int,
    at: float,
    detail: str | None,
) -> None:
    conn.execute(
        insert(_E).values(
            reservation_id=reservation_id,
            event=event.value,
            actor_uid=actor_uid,
            at=at,
            detail=detail,
        )
    )


class ReservationRecords(LedgerAccess):
    """The `advance_reservations` and `reservation_events` tables."""

    def add_reservation(self, reservation: AdvanceReservation) -> None:
        """Record a new reservation and its `created` event, in one transaction."""
        r = reservation
        with self._write() as conn:
            conn.execute(
                insert(_R).values(
                    id=r.id,
                    gpus=",".join(r.gpus),
                    start_at=r.start_at,
                    end_at=r.end_at,
                    user=r.user,
                    group=r.group,
                    reason=r.reason,
                    by_uid=r.by_uid,
                    by_user=r.by_user,
                    created_at=r.created_at,
                )
            )
            _event(conn, r.id, ReservationEvent.CREATED, r.by_uid, r.created_at, r.reason)

    def cancel_reservation(self, reservation_id: str, actor_uid: int, at: float) -> None:
        with self._write() as conn:
            conn.execute(update(_R).where(_R.c.id == reservation_id).values(cancelled_at=at))
            _event(conn, reservation_id, ReservationEvent.CANCELLED, actor_uid, at, None)

    def note_reservation(
        self, reservation_id: str, event: ReservationEvent, at: float, detail: str | None
    ) -> None:
        """Record that a reservation started or ended (the daemon's doing)."""
        with self._write() as conn:
            _event(conn, reservation_id, event, 0, at, detail)

    def unfinished_reservations(self) -> list[tuple[AdvanceReservation, bool]]:
        """Reservations neither cancelled nor recorded as ended, each with whether its start
        is recorded."""

        def happened(event: ReservationEvent) -> Any:
            return (
                select(_E.c.seq)
                .where(_E.c.reservation_id == _R.c.id, _E.c.event == event.value)
                .exists()
            )

        query = select(_R, happened(ReservationEvent.STARTED).label("started")).where(
            _R.c.cancelled_at.is_(None), ~happened(ReservationEvent.ENDED)
        )
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [(_from_row(r), bool(r["started"])) for r in rows]

    def reservations(self, *, ended_after: float | None = None) -> list[AdvanceReservation]:
        """Reservations ending after `ended_after` (all when None), by start."""
        query = select(_R).order_by(_R.c.start_at, _R.c.id)
        if ended_after is not None:
            query = query.where(_R.c.end_at > ended_after)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [_from_row(r) for r in rows]

    def reservation_events(
        self, reservation_id: str | None = None, limit: int = 100
    ) -> list[ReservationRecord]:
        """The last `limit` reservation events (of one reservation where given), oldest first."""
        query = select(_E).order_by(_E.c.seq.desc()).limit(limit)
        if reservation_id is not None:
            query = query.where(_E.c.reservation_id == reservation_id)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            ReservationRecord(
                seq=r["seq"],
                reservation_id=r["reservation_id"],
                event=ReservationEvent(r["event"]),
                actor_uid=r["actor_uid"],
                at=r["at"],
                detail=r["detail"],
            )
            for r in reversed(rows)
        ]
