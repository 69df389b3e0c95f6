"""The `pending_cleanups` table: cleanups owed after a lease's end, until they are done.

The rows of a lease's end are written by `cleanup_steps` (the plans', device ACLs) and
`owe_steps` (a power limit to put back) in the very transaction that ends the lease
(store.py's `end`), so a crash can lose neither the end nor what it owes; others come
through `add_cleanups`. A runner (allocator/cleanups.py) does each when due, and in one
transaction a round deletes what was done and puts off the next try of what failed. Work
already owed (the same kind, target and payload) is not added twice; work a grant makes
needless (a limit to put back on a GPU whose next lease sets its own) goes in the grant's
transaction (`supersede_steps`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.sqlite import insert

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.ledger.hot import Step
from gpuallocd.model import Lease
from gpuallocd.model.cleanup import Cleanup, PendingCleanup

__all__ = [
    "CleanupPlan",
    "CleanupRecords",
    "cleanup_steps",
    "due_now_steps",
    "owe_steps",
    "supersede_steps",
]

CleanupPlan = Callable[[Lease], Sequence[Cleanup]]

_INSERT = (
    "INSERT INTO pending_cleanups (kind, target, payload, lease_id, created_at, attempts, "
    "next_try) VALUES (?, ?, ?, ?, ?, 0, ?) ON CONFLICT (kind, target, payload) DO NOTHING"
)
_COLUMNS = ("kind", "target", "payload", "lease_id", "created_at", "next_try")
_KEY = ("kind", "target", "payload")  # the unique index `one_pending_cleanup`


_SUPERSEDE = "DELETE FROM pending_cleanups WHERE kind = ? AND target = ?"
_DUE_NOW = "UPDATE pending_cleanups SET next_try = ? WHERE kind = ? AND target = ? AND next_try > ?"
_DONE = "DELETE FROM pending_cleanups WHERE id = ?"
_FAILED = (
    "UPDATE pending_cleanups SET attempts = attempts + 1, next_try = ?, last_error = ? WHERE id = ?"
)
_FIRST_DUE = "SELECT min(next_try) FROM pending_cleanups"


def _row(cleanup: Cleanup, now: float, next_try: float | None = None) -> tuple[Any, ...]:
    payload = json.dumps(dict(cleanup.payload), sort_keys=True)
    due = now if next_try is None else next_try
    return (cleanup.kind, cleanup.target, payload, cleanup.lease_id, now, due)


def owe_steps(cleanups: Iterable[Cleanup], now: float, next_try: float) -> list[Step]:
    """The inserts of `cleanups` owed from `now`, first due at `next_try`, for the
    transaction of the change that owes them."""
    return [(_INSERT, _row(cleanup, now, next_try)) for cleanup in cleanups]


def supersede_steps(kind: str, targets: Iterable[str]) -> list[Step]:
    """The deletes of work of `kind` owed on `targets` that a change makes needless."""
    return [(_SUPERSEDE, (kind, target)) for target in targets]


def due_now_steps(kind: str, targets: Iterable[str], now: float) -> list[Step]:
    """Work of `kind` owed on `targets` made due at once (by the change that needs it)."""
    return [(_DUE_NOW, (now, kind, target, now)) for target in targets]


def cleanup_steps(leases: Iterable[Lease], plans: Sequence[CleanupPlan]) -> list[Step]:
    """The inserts of what the ended `leases` owe by each plan, for the transaction that
    ends them."""
    steps: list[Step] = []
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

    def first_cleanup_due(self) -> float | None:
        """When the first cleanup not done yet is due; None without one."""
        with self._read() as conn:
            found = conn.exec_driver_sql(_FIRST_DUE).scalar()
        return None if found is None else float(found)

    def cleanups_settled(
        self, done: Sequence[int], failed: Sequence[tuple[int, float, str]]
    ) -> None:
        """One round's outcome in one transaction: the `done` rows go, each `failed` one
        (id, next try, error) counts one more attempt."""
        steps: list[Step] = [(_DONE, (cleanup_id,)) for cleanup_id in done]
        steps += [(_FAILED, (next_try, error, row)) for row, next_try, error in failed]
        if steps:
            self._hot_write(steps)
