"""The record of GPU use without a lease (`unleased_use`): one row per action on a process."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, select

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess

__all__ = ["UnleasedRecords"]


class UnleasedRecords(LedgerAccess):
    """The `unleased_use` table."""

    def record_unleased(self, row: dict[str, Any]) -> None:
        """One action on one process: at, action, gpu_uuid, unit_uuid, pid, uid, user,
        command, lease_id, detail."""
        with self._write() as conn:
            conn.execute(insert(schema.unleased_use).values(**row))

    def unleased_events(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest `limit` actions, oldest first."""
        table = schema.unleased_use
        query = select(table).order_by(table.c.seq.desc()).limit(limit)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [dict(row) for row in reversed(rows)]

    def purge_unleased_before(self, cutoff: float, batch: int) -> int:
        """Delete up to `batch` records older than `cutoff`; how many went."""
        table = schema.unleased_use
        old = select(table.c.seq).where(table.c.at < cutoff).limit(batch).scalar_subquery()
        with self._write() as conn:
            done = conn.execute(delete(table).where(table.c.seq.in_(old)))
        return int(done.rowcount or 0)
