"""The record of energy drawn (`energy_use`): one row per reading, per lease or unleased user."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, select

from gpuallocd.ledger import schema
from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.ledger.totals import energy_changes
from gpuallocd.model.energy import EnergyUse, LeaseEnergy

__all__ = ["EnergyRecords", "energy_steps"]

_E = schema.energy_use
_INSERT = (
    "INSERT INTO energy_use (lease_id, owner_uid, owner_name, at, joules, estimate, "
    "gpu_seconds) VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def energy_steps(uses: Sequence[EnergyUse]) -> list[tuple[str, Sequence[Any]]]:
    """The inserts of readings, for the transaction of the grant or end that read them."""
    return [(_INSERT, tuple(use.to_row().values())) for use in uses]


class EnergyRecords(LedgerAccess):
    """The `energy_use` table."""

    def record_energy(self, uses: Sequence[EnergyUse]) -> None:
        """Rows of energy drawn since the previous reading (nothing for none), added to their
        owners' running totals."""
        if uses:
            self._hot_write(energy_steps(uses) + self._total_steps(energy_changes(uses)))

    def lease_energy(self, lease_id: str) -> LeaseEnergy | None:
        """The energy a lease drew so far; None where none was read for it."""
        query = select(func.count(), func.total(_E.c.joules), func.max(_E.c.estimate)).where(
            _E.c.lease_id == lease_id
        )
        with self._read() as conn:
            count, joules, estimate = conn.execute(query).one()
        return LeaseEnergy(float(joules), bool(estimate)) if count else None

    def energy_readings(self, uid: int, since: float) -> list[tuple[float, float]]:
        """(time, joules) of `uid`'s readings after `since`, leased and unleased (budgets)."""
        query = select(_E.c.at, _E.c.joules).where(_E.c.owner_uid == uid, _E.c.at > since)
        with self._read() as conn:
            return [(float(at), float(joules)) for at, joules in conn.execute(query)]

    def purge_energy_before(self, cutoff: float, batch: int) -> int:
        """Delete up to `batch` readings older than `cutoff`; how many went."""
        old = select(_E.c.seq).where(_E.c.at < cutoff).limit(batch).scalar_subquery()
        with self._write() as conn:
            done = conn.execute(delete(_E).where(_E.c.seq.in_(old)))
        return int(done.rowcount or 0)
