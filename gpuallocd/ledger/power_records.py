"""The record of power limits owed back to GPUs (`power_caps`), so that a crash cannot leave
a GPU capped: what to put back is durable before the cap is set.

A GPU's row is written in the transaction of the grant that caps it first (the lease's cap
itself is on its unit, `lease_gpus.cap_mw`, in the same transaction) and outlives its lease
until the limit is put back (deleted with the next change), or until a put-back that failed
turns it into owed work (`pending_cleanups`, kind `power_limit`) in one transaction. A grant
of the GPU meanwhile that caps it too writes nothing here: the limit owed back is the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.ledger.cleanup_records import owe_steps
from gpuallocd.ledger.hot import Step
from gpuallocd.model.cleanup import Cleanup
from gpuallocd.model.power import PowerCap

__all__ = ["PowerRecords", "cap_steps", "forget_cap_steps"]

_INSERT = "INSERT INTO power_caps (gpu_uuid, lease_id, set_mw, restore_mw) VALUES (?, ?, ?, ?)"
_DELETE = "DELETE FROM power_caps WHERE gpu_uuid = ?"
_RECORDS = (  # the first written of a GPU's rows last: it is the one kept
    "SELECT gpu_uuid, lease_id, set_mw, restore_mw FROM power_caps ORDER BY gpu_uuid, rowid DESC"
)
_UNIT_CAPS = (
    "SELECT gpu_uuid, lease_id, cap_mw FROM lease_gpus "
    "WHERE active = 1 AND cap_mw IS NOT NULL ORDER BY gpu_uuid"
)


def cap_steps(caps: Iterable[PowerCap]) -> list[Step]:
    """The records of what a grant's caps owe back, for its transaction (GPUs that owe
    nothing yet)."""
    return [(_INSERT, (c.gpu_uuid, c.lease_id, c.set_mw, c.restore_mw)) for c in caps]


def forget_cap_steps(caps: Iterable[PowerCap]) -> list[Step]:
    """The deletes of the records of limits put back (or owed as work instead), by GPU."""
    return [(_DELETE, (c.gpu_uuid,)) for c in caps]


class PowerRecords(LedgerAccess):
    """The `power_caps` table."""

    def record_caps(self, caps: Iterable[PowerCap]) -> None:
        steps = cap_steps(caps)
        if steps:
            self._hot_write(steps)

    def cap_records(self) -> tuple[list[PowerCap], list[PowerCap]]:
        """The caps of active leases, by GPU, each with the limit its GPU's record owes back
        at their end; and the records no active lease's cap backs (their limits are owed back
        now), as written by the lease that capped the GPU first. Of two records of one GPU
        (an older version's), the first written says what to put back."""
        with self._read() as conn:
            rows = conn.exec_driver_sql(_RECORDS).all()
            units = conn.exec_driver_sql(_UNIT_CAPS).all()
        records = {
            str(gpu): PowerCap(str(gpu), str(lease), int(cap), int(back))
            for gpu, lease, cap, back in rows
        }
        held = []
        for gpu, lease_id, cap_mw in units:
            record = records.pop(str(gpu), None)
            if record is not None:
                held.append(PowerCap(str(gpu), str(lease_id), int(cap_mw), record.restore_mw))
        return held, list(records.values())

    def power_caps(self) -> list[PowerCap]:
        """Every cap recorded, by GPU: an active lease's, else the record owed back now."""
        held, owed = self.cap_records()
        return sorted(held + owed, key=lambda cap: cap.gpu_uuid)

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
