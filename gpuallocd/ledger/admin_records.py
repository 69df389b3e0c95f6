"""Drained GPUs and the record of admin actions (revoke, drain, undrain), in the ledger."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, delete, insert, select

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.model import AdminAction, AdminActionKind, Drain

__all__ = ["AdminRecords"]


def _record_action(
    conn: Connection,
    action: AdminActionKind,
    target: str,
    actor_uid: int,
    actor: str,
    at: float,
    reason: str | None,
) -> None:
    conn.execute(
        insert(schema.admin_actions).values(
            at=at,
            action=action.value,
            target=target,
            actor_uid=actor_uid,
            actor=actor,
            reason=reason,
        )
    )


def _drain_from_row(row: Any) -> Drain:
    return Drain(row["gpu_uuid"], row["reason"], row["by_user"], row["by_uid"], row["at"])


def _action_from_row(row: Any) -> AdminAction:
    return AdminAction(
        seq=row["seq"],
        at=row["at"],
        action=AdminActionKind(row["action"]),
        target=row["target"],
        actor_uid=row["actor_uid"],
        actor=row["actor"],
        reason=row["reason"],
    )


class AdminRecords(LedgerAccess):
    """The `drains` and `admin_actions` tables."""

    def drain(self, drains: Sequence[Drain]) -> None:
        """Record GPUs as drained (a new reason replaces the old), each with its action."""
        with self._write() as conn:
            for d in drains:
                conn.execute(delete(schema.drains).where(schema.drains.c.gpu_uuid == d.gpu_uuid))
                conn.execute(
                    insert(schema.drains).values(
                        gpu_uuid=d.gpu_uuid,
                        reason=d.reason,
                        by_uid=d.by_uid,
                        by_user=d.by,
                        at=d.at,
                    )
                )
                _record_action(
                    conn, AdminActionKind.DRAIN, d.gpu_uuid, d.by_uid, d.by, d.at, d.reason
                )

    def undrain(self, uuids: Sequence[str], actor_uid: int, actor: str, at: float) -> None:
        with self._write() as conn:
            for uuid in uuids:
                conn.execute(delete(schema.drains).where(schema.drains.c.gpu_uuid == uuid))
                _record_action(conn, AdminActionKind.UNDRAIN, uuid, actor_uid, actor, at, None)

    def drains(self) -> list[Drain]:
        with self._read() as conn:
            rows = conn.execute(select(schema.drains).order_by(schema.drains.c.at)).mappings()
            return [_drain_from_row(r) for r in rows.all()]

    def record_revoke(
        self, lease_id: str, actor_uid: int, actor: str, at: float, reason: str | None
    ) -> None:
        with self._write() as conn:
            _record_action(conn, AdminActionKind.REVOKE, lease_id, actor_uid, actor, at, reason)

    def record_preempt(
        self, lease_id: str, actor_uid: int, actor: str, at: float, reason: str | None
    ) -> None:
        with self._write() as conn:
            _record_action(conn, AdminActionKind.PREEMPT, lease_id, actor_uid, actor, at, reason)

    def record_recovery(self, at: float, actor_uid: int, actor: str, summary: str) -> None:
        """Record a rebuild of the ledger (`gpuallocd --recover`) and what it found lost."""
        with self._write() as conn:
            _record_action(conn, AdminActionKind.RECOVER, "ledger", actor_uid, actor, at, summary)

    def admin_actions(self, limit: int = 100) -> list[AdminAction]:
        """The last `limit` admin actions, oldest first."""
        query = (
            select(schema.admin_actions).order_by(schema.admin_actions.c.seq.desc()).limit(limit)
        )
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [_action_from_row(r) for r in reversed(rows)]
