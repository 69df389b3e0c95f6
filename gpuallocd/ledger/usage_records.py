"""Accounting reads over the ledger's leases, and the purge of old history in small batches."""

from __future__ import annotations

from sqlalchemy import delete, func, or_, select

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.model import LeaseSpan

__all__ = ["GPU_COUNT", "UsageRecords"]

_L = schema.leases
# A lease counts for the GPUs it holds, a share or a MIG instance by its fraction of one.
GPU_COUNT = (
    select(func.coalesce(func.sum(schema.lease_gpus.c.fraction), 0.0))
    .select_from(schema.lease_gpus)
    .where(schema.lease_gpus.c.lease_id == _L.c.id)
    .scalar_subquery()
)


class UsageRecords(LedgerAccess):
    """Lease spans for accounting and limits; purge of ended leases past retention."""

    def lease_spans(
        self, since: float, until: float, uid: int | None = None, *, with_unleased: bool = False
    ) -> list[LeaseSpan]:
        """Every lease held at some time inside [since, until) (active ones included); with
        `with_unleased`, unleased use as well (fair share where the site counts it)."""
        query = select(
            _L.c.owner_uid,
            _L.c.owner_name,
            _L.c.created_at,
            _L.c.ended_at,
            _L.c.waited_seconds,
            GPU_COUNT.label("gpus"),
        ).where(or_(_L.c.ended_at.is_(None), _L.c.ended_at > since), _L.c.created_at < until)
        if uid is not None:
            query = query.where(_L.c.owner_uid == uid)
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [
            LeaseSpan(
                owner_uid=r["owner_uid"],
                owner_name=r["owner_name"],
                gpus=float(r["gpus"]),
                created_at=r["created_at"],
                ended_at=r["ended_at"],
                waited_seconds=r["waited_seconds"],
            )
            for r in rows
        ] + (self._unleased_spans(since, until) if with_unleased else [])

    def _unleased_spans(self, since: float, until: float) -> list[LeaseSpan]:
        """Unleased use (docs/accounting.md) as spans: each reading's GPU-seconds of one GPU,
        ending at the reading."""
        e = schema.energy_use
        query = select(e.c.owner_uid, e.c.owner_name, e.c.at, e.c.gpu_seconds).where(
            e.c.lease_id.is_(None), e.c.at > since, e.c.at - e.c.gpu_seconds < until
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [LeaseSpan(uid, name, 1.0, at - seconds, at) for uid, name, at, seconds in rows]

    def purge_before(self, cutoff: float, batch: int) -> int:
        """Delete up to `batch` leases that ended before `cutoff`, with their GPUs and history,
        and admin actions older than `cutoff`; how many rows of leases and actions went."""
        with self._write() as conn:
            ids = list(
                conn.execute(select(_L.c.id).where(_L.c.ended_at < cutoff).limit(batch)).scalars()
            )
            if ids:
                h, g, e = schema.history, schema.lease_gpus, schema.energy_use
                for table in (schema.preemptions, schema.preemptible_leases, schema.idle_spells):
                    conn.execute(delete(table).where(table.c.lease_id.in_(ids)))
                conn.execute(delete(e).where(e.c.lease_id.in_(ids)))
                conn.execute(delete(h).where(h.c.lease_id.in_(ids)))
                conn.execute(delete(g).where(g.c.lease_id.in_(ids)))
                conn.execute(delete(_L).where(_L.c.id.in_(ids)))
            a = schema.admin_actions
            old = select(a.c.seq).where(a.c.at < cutoff).limit(batch).scalar_subquery()
            actions = conn.execute(delete(a).where(a.c.seq.in_(old))).rowcount
        return len(ids) + int(actions or 0)
