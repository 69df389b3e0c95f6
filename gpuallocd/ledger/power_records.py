"""The record of power limits set for leases (`power_caps`), so that a crash cannot leave a
GPU capped: what to put back is durable before the cap is set."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.model.power import PowerCap

__all__ = ["PowerRecords"]

_P = schema.power_caps
_INSERT = "INSERT INTO power_caps (gpu_uuid, lease_id, set_mw, restore_mw) VALUES (?, ?, ?, ?)"
_DELETE = "DELETE FROM power_caps WHERE gpu_uuid = ? AND lease_id = ?"


class PowerRecords(LedgerAccess):
    """The `power_caps` table."""

    def record_caps(self, caps: Iterable[PowerCap]) -> None:
        steps = [(_INSERT, (c.gpu_uuid, c.lease_id, c.set_mw, c.restore_mw)) for c in caps]
        if steps:
            self._hot_write(steps)

    def power_caps(self) -> list[PowerCap]:
        """Every cap not yet put back, oldest lease first by GPU."""
        with self._read() as conn:
            rows = conn.execute(select(_P).order_by(_P.c.gpu_uuid)).mappings().all()
        return [PowerCap(r["gpu_uuid"], r["lease_id"], r["set_mw"], r["restore_mw"]) for r in rows]

    def forget_caps(self, caps: Iterable[PowerCap]) -> None:
        """Delete the records of caps whose limits were put back."""
        steps = [(_DELETE, (c.gpu_uuid, c.lease_id)) for c in caps]
        if steps:
            self._hot_write(steps)
