"""The `pending_cleanups` table: cleanups owed after a lease's end, until they are done.

The rows of a lease's end are written by `cleanup_steps` in the very transaction that ends
the lease (store.py's `end`), so a crash can lose neither the end nor what it owes; others
(a power limit to restore, say) come through `add_cleanups`. A runner (allocator/cleanups.py)
does each, and deletes it when done or puts off its next try when it fails. Work already
owed (the same kind, target and payload) is not added twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.dialects.sqlite import insert

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.model import Lease
from gpuallocd.model.cleanup import Cleanup, PendingCleanup

__all__ = ["CleanupPlan", "CleanupRecords", "cleanup_steps"]

CleanupPlan = Callable[[Lease], Sequence[Cleanup]]

_INSERT = (
    "INSERT INTO pending_cleanups (kind, target, payload, lease_id, created_at, attempts, "
    "next_try) VALUES (?, ?, ?, ?, ?, 0, ?) ON CONFLICT (kind, target, payload) DO NOTHING"
)
_COLUMNS = ("kind", "target", "payload", "lease_id", "created_at", "next_try")
_KEY = ("kind", "target", "payload")  # the unique index `one_pending_cleanup`


def _row(cleanup: Cleanup, now: float) -> tuple[Any, ...]:
    payload = json.dumps(dict(cleanup.payload), sort_keys=True)
    return (cleanup.kind, cleanup.target, payload, cleanup.lease_id, now, now)


def cleanup_steps(
    leases: Iterable[Lease], plans: Sequence[CleanupPlan]
) -> list[tuple[str, Sequence[Any]]]:
    """The inserts of what the ended `leases` owe by each plan, for the transaction that
    ends them."""
    steps: list[tuple[str, Sequence[Any]]] = []
    for lease in leases if plans else ():
        at = lease.ended_at if lease.ended_at is not None else lease.expires_at
        for plan in plans:
            steps.extend((_INSERT, _row(cleanup, at)) for cleanup in plan(lease))
    return steps


def _pending(row: Any) -> PendingCleanup:
    payload = json.loads(row["payload"] or "{}")
    cleanup = Cleanup(row["kind"], row["target"], payload, row["lease_id"])
    return PendingCleanup(
        id=int(row["id"]),
        cleanup=cleanup,
        created_at=float(row["created_at"]),
        attempts=int(row["attempts"]),
        next_try=float(row["next_try"]),
        last_error=row["last_error"],
    )


class CleanupRecords(LedgerAccess):
    """The `pending_cleanups` table."""

    def add_cleanups(self, cleanups: Iterable[Cleanup], now: float) -> None:
        """Owe `cleanups` from now on, in one transaction."""
        rows = [dict(zip(_COLUMNS, _row(c, now), strict=True)) for c in cleanups]
        if not rows:
            return
        with self._write() as conn:
            owed = insert(schema.pending_cleanups).on_conflict_do_nothing(index_elements=_KEY)
            conn.execute(owed, rows)

    def pending_cleanups(self, due_by: float | None = None) -> list[PendingCleanup]:
        """The cleanups not done yet, oldest first; only those due by `due_by` if given."""
        table = schema.pending_cleanups
        query = select(table).order_by(table.c.id)
        if due_by is not None:
            query = query.where(table.c.next_try <= due_by)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [_pending(row) for row in rows]

    def cleanup_done(self, cleanup_id: int) -> None:
        table = schema.pending_cleanups
        with self._write() as conn:
            conn.execute(delete(table).where(table.c.id == cleanup_id))

    def cleanup_failed(self, cleanup_id: int, next_try: float, error: str) -> None:
        """One more failed attempt; the next one not before `next_try`."""
        table = schema.pending_cleanups
        values = {"attempts": table.c.attempts + 1, "next_try": next_try, "last_error": error}
        with self._write() as conn:
            conn.execute(update(table).where(table.c.id == cleanup_id).values(**values))
