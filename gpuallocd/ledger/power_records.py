"""The record of power limits set for leases (`power_caps`), so that a crash cannot leave a
GPU capped: what to put back is durable before the cap is set.

A row is written in the grant's transaction and outlives its lease until the limit is put
back (deleted with the next change), or until a grant of the GPU takes it over (`move`), or
until a put-back that failed turns it into owed work (`pending_cleanups`, kind
`power_limit`) in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import select

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.ledger.cleanup_records import owe_steps
from gpuallocd.ledger.hot import Step
from gpuallocd.model.cleanup import Cleanup
from gpuallocd.model.power import PowerCap

__all__ = ["PowerRecords", "cap_steps", "forget_cap_steps", "move_cap_steps"]

_P = schema.power_caps
_INSERT = "INSERT INTO power_caps (gpu_uuid, lease_id, set_mw, restore_mw) VALUES (?, ?, ?, ?)"
_DELETE = "DELETE FROM power_caps WHERE gpu_uuid = ? AND lease_id = ?"
_MOVE = "UPDATE power_caps SET lease_id = ?, set_mw = ? WHERE gpu_uuid = ? AND lease_id = ?"


def cap_steps(caps: Iterable[PowerCap]) -> list[Step]:
    """The records of a grant's caps, for its transaction."""
    return [(_INSERT, (c.gpu_uuid, c.lease_id, c.set_mw, c.restore_mw)) for c in caps]


def forget_cap_steps(caps: Iterable[PowerCap]) -> list[Step]:
    """The deletes of ended leases' cap records, for the end's transaction."""
    return [(_DELETE, (c.gpu_uuid, c.lease_id)) for c in caps]


def move_cap_steps(ended: PowerCap, cap: PowerCap) -> list[Step]:
    """An ended lease's record taken over by the GPU's next capped lease: the same limit to
    put back, now owed by `cap`'s lease (one statement, for the grant's transaction)."""
    return [(_MOVE, (cap.lease_id, cap.set_mw, ended.gpu_uuid, ended.lease_id))]


class PowerRecords(LedgerAccess):
    """The `power_caps` table."""

    def record_caps(self, caps: Iterable[PowerCap]) -> None:
        steps = cap_steps(caps)
        if steps:
            self._hot_write(steps)

    def power_caps(self) -> list[PowerCap]:
        """Every cap recorded, by GPU."""
        with self._read() as conn:
            rows = conn.execute(select(_P).order_by(_P.c.gpu_uuid)).mappings().all()
        return [PowerCap(r["gpu_uuid"], r["lease_id"], r["set_mw"], r["restore_mw"]) for r in rows]

    def forget_caps(self, caps: Iterable[PowerCap]) -> None:
        """Delete the records of limits put back."""
        steps = forget_cap_steps(caps)
        if steps:
            self._hot_write(steps)

    def owe_caps(self, caps: Sequence[PowerCap], put_backs: Sequence[Cleanup], now: float) -> None:
        """In one transaction: forget the records of `caps` (of leases no longer active) and
        owe `put_backs` instead (the daemon's start, for records an older version left)."""
        steps = forget_cap_steps(caps) + owe_steps(put_backs, now, now)
        if steps:
            self._hot_write(steps)
