"""The record of power limits set for leases (`power_caps`), so that a crash cannot leave a
GPU capped: what to put back is durable before the cap is set."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import and_, delete, insert, or_, select

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.model.power import PowerCap

__all__ = ["PowerRecords"]

_P = schema.power_caps


class PowerRecords(LedgerAccess):
    """The `power_caps` table."""

    def record_caps(self, caps: Iterable[PowerCap]) -> None:
        rows = [
            {
                "gpu_uuid": c.gpu_uuid,
                "lease_id": c.lease_id,
                "set_mw": c.set_mw,
                "restore_mw": c.restore_mw,
            }
            for c in caps
        ]
        if rows:
            with self._write() as conn:
                conn.execute(insert(_P), rows)

    def power_caps(self) -> list[PowerCap]:
        """Every cap not yet put back, oldest lease first by GPU."""
        with self._read() as conn:
            rows = conn.execute(select(_P).order_by(_P.c.gpu_uuid)).mappings().all()
        return [PowerCap(r["gpu_uuid"], r["lease_id"], r["set_mw"], r["restore_mw"]) for r in rows]

    def forget_caps(self, caps: Iterable[PowerCap]) -> None:
        """Delete the records of caps whose limits were put back."""
        pairs = [and_(_P.c.gpu_uuid == c.gpu_uuid, _P.c.lease_id == c.lease_id) for c in caps]
        if pairs:
            with self._write() as conn:
                conn.execute(delete(_P).where(or_(*pairs)))
