"""Preemptible leases' terms (`preemptible_leases`) and their preemptions (`preemptions`).

A preemptible lease's terms are a step of its grant's transaction (`terms_steps`, on the hot
path's connection), so no lease is ever granted preemptible without them. A preemption is
written with its `preempt_warning` history event and its owner's notice in one transaction,
by the allocator (allocator/preemption/); its state moves on in the transactions that signal,
acknowledge or end it. Checkpoint paths are text a job gave: recorded, never opened.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import insert, select, update

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.model.lease import Lease
from gpuallocd.model.preemption import (
    Preemption,
    PreemptionState,
    PreemptTerms,
    PreemptTrigger,
)

__all__ = ["PreemptionRecords", "terms_from_row", "terms_steps"]

_T = schema.preemptible_leases
_P = schema.preemptions
_INSERT_TERMS = (
    "INSERT INTO preemptible_leases (lease_id, min_runtime_seconds, lead_seconds, "
    "grace_seconds, signal, queued_since, requeue_of) VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def terms_steps(lease: Lease) -> list[tuple[str, Sequence[Any]]]:
    """The grant's step that records a preemptible lease's terms (none for another lease)."""
    terms = lease.preemptible
    if terms is None:
        return []
    values = (
        lease.id,
        terms.min_runtime_seconds,
        terms.lead_seconds,
        terms.grace_seconds,
        terms.signal,
        terms.queued_since,
        terms.requeue_of,
    )
    return [(_INSERT_TERMS, values)]


def terms_from_row(row: Any) -> PreemptTerms:
    return PreemptTerms(
        min_runtime_seconds=row["min_runtime_seconds"],
        lead_seconds=row["lead_seconds"],
        grace_seconds=row["grace_seconds"],
        signal=row["signal"],
        queued_since=row["queued_since"],
        requeue_of=row["requeue_of"],
    )


def _preemption_from_row(row: Any) -> Preemption:
    return Preemption(
        lease_id=row["lease_id"],
        owner_uid=row["owner_uid"],
        owner_name=row["owner_name"],
        trigger=PreemptTrigger(row["trigger"]),
        for_uid=row["for_uid"],
        for_user=row["for_user"],
        explanation=row["explanation"],
        decided_at=row["decided_at"],
        signal_at=row["signal_at"],
        deadline_at=row["deadline_at"],
        signal=row["signal"],
        state=PreemptionState(row["state"]),
        signalled_at=row["signalled_at"],
        ended_at=row["ended_at"],
        acknowledged_at=row["acknowledged_at"],
        checkpoint=row["checkpoint"],
        late=bool(row["late"]),
    )


def _preemption_row(preemption: Preemption) -> dict[str, Any]:
    return {
        "lease_id": preemption.lease_id,
        "owner_uid": preemption.owner_uid,
        "owner_name": preemption.owner_name,
        "trigger": preemption.trigger.value,
        "for_uid": preemption.for_uid,
        "for_user": preemption.for_user,
        "explanation": preemption.explanation,
        "decided_at": preemption.decided_at,
        "signal_at": preemption.signal_at,
        "deadline_at": preemption.deadline_at,
        "signal": preemption.signal,
        "state": preemption.state.value,
        "signalled_at": preemption.signalled_at,
        "ended_at": preemption.ended_at,
        "acknowledged_at": preemption.acknowledged_at,
        "checkpoint": preemption.checkpoint,
        "late": preemption.late,
    }


class PreemptionRecords(LedgerAccess):
    """Terms, checkpoints and preemptions."""

    def preempt_terms(self, lease_ids: Iterable[str]) -> dict[str, PreemptTerms]:
        """The terms of those of these leases that are preemptible."""
        ids = list(lease_ids)
        if not ids:
            return {}
        with self._read() as conn:
            rows = conn.execute(select(_T).where(_T.c.lease_id.in_(ids))).mappings().all()
        return {r["lease_id"]: terms_from_row(r) for r in rows}

    def last_checkpoints(self, lease_ids: Iterable[str]) -> dict[str, tuple[float, str | None]]:
        """When each of these leases' jobs last acknowledged a checkpoint, and its path."""
        ids = list(lease_ids)
        query = select(_T.c.lease_id, _T.c.checkpoint_at, _T.c.checkpoint_path).where(
            _T.c.lease_id.in_(ids), _T.c.checkpoint_at.is_not(None)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return {lease_id: (float(at), path) for lease_id, at, path in rows}

    def record_checkpoint(self, lease_id: str, at: float, path: str | None) -> None:
        with self._write() as conn:
            conn.execute(
                update(_T)
                .where(_T.c.lease_id == lease_id)
                .values(checkpoint_at=at, checkpoint_path=path)
            )

    def requeued_as(self, lease_id: str) -> str | None:
        """The lease a requeue of `lease_id` was granted, if one was."""
        query = select(_T.c.lease_id).where(_T.c.requeue_of == lease_id).limit(1)
        with self._read() as conn:
            found = conn.execute(query).scalar()
        return None if found is None else str(found)

    def add_preemption(self, preemption: Preemption) -> None:
        with self._write() as conn:
            conn.execute(insert(_P).values(**_preemption_row(preemption)))

    def save_preemption(self, preemption: Preemption) -> None:
        """Record a preemption's new state (its deadline never changes)."""
        row = _preemption_row(preemption)
        with self._write() as conn:
            conn.execute(update(_P).where(_P.c.lease_id == row.pop("lease_id")).values(**row))

    def preemption(self, lease_id: str) -> Preemption | None:
        with self._read() as conn:
            row = conn.execute(select(_P).where(_P.c.lease_id == lease_id)).mappings().first()
        return None if row is None else _preemption_from_row(row)

    def open_preemptions(self) -> list[Preemption]:
        """The preemptions of active leases not yet ended (what a restart resumes)."""
        active = select(schema.leases.c.id).where(schema.leases.c.state == "active")
        query = (
            select(_P)
            .where(_P.c.state.in_(("warned", "signalled")), _P.c.lease_id.in_(active))
            .order_by(_P.c.decided_at)
        )
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [_preemption_from_row(r) for r in rows]
