"""What a lease does to its GPUs besides holding them: it must fit the box's power budget
(budget.py), its energy is read (energy.py) and its power cap set and put back
(caps.py). The lifecycle calls `granted` and `ending` in the
transaction of the change; once it is committed the caps follow, told as an observer."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gpuallocd.allocator.power.budget import PowerBudget
from gpuallocd.allocator.power.caps import PowerCaps
from gpuallocd.allocator.power.energy import EnergyMeter
from gpuallocd.ledger import Ledger
from gpuallocd.model import Lease

__all__ = ["LeaseHardware"]


class LeaseHardware:
    """The energy meter and the power caps of one node (neither does anything without NVML)."""

    def __init__(
        self,
        energy: EnergyMeter | None = None,
        caps: PowerCaps | None = None,
        budget: PowerBudget | None = None,
    ) -> None:
        self.energy = energy or EnergyMeter(None)
        self.caps = caps or PowerCaps(None)
        self.budget = budget or PowerBudget(None, None, "wait")

    def granted(self, ledger: Ledger, active: Collection[Lease], lease: Lease, at: float) -> Lease:
        """The lease to record: as asked, or with a lower cap to fit the power budget
        (GpusUnavailable where it does not fit)."""
        lease = self.budget.fitted(active, lease, self.caps.in_force)
        self.energy.record(ledger, active, [lease], at)
        self.caps.granted(ledger, lease)
        return lease

    def ending(
        self, ledger: Ledger, active: Collection[Lease], leases: Sequence[Lease], at: float
    ) -> None:
        self.energy.record(ledger, active, leases, at)
        self.caps.ending(ledger, leases)

    # After the commit (allocator/observer.py) ------------------------------------------------

    def lease_granted(self, lease: Lease) -> None:
        self.caps.lease_granted(lease)

    def lease_ended(self, lease: Lease) -> None:
        self.caps.lease_ended(lease)

    def commit_published(self) -> None:
        self.caps.commit_published()

    def allocation_finished(self, seconds: float, *, waited: bool, outcome: str) -> None:
        return None
