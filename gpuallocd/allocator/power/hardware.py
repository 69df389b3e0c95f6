"""What a lease does to its GPUs besides holding them: it must fit the box's power budget
(budget.py), its energy is read (energy.py) and its power cap set and put back
(caps.py). The lifecycle calls `granted` and `ending` in the
transaction of the change; once it is committed the caps follow, told as an observer. Each
live sample is told too (`sampled`): who uses each GPU splits its energy, and names who draws
without a lease when the budget refuses."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from gpuallocd.allocator.power.budget import Drawers, PowerBudget
from gpuallocd.allocator.power.caps import PowerCaps
from gpuallocd.allocator.power.energy import EnergyMeter
from gpuallocd.allocator.power.split import user_shares
from gpuallocd.ledger import Ledger
from gpuallocd.model import Lease, LiveState, Topology

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
        self._latest: Mapping[str, LiveState] = {}  # the last live sample
        self._topology: Topology | None = None

    def sampled(
        self, states: Mapping[str, LiveState], active: Collection[Lease], topology: Topology
    ) -> None:
        """A live sample (in the worker, like every call here): who uses each GPU now."""
        self.energy.sampled(states, active)
        self._latest, self._topology = states, topology

    def drawers(self) -> Drawers:
        """Who used each GPU at the last sample: its index and each user's memory share (read
        only when the budget refuses, to say who draws)."""
        index = {} if self._topology is None else {g.uuid: g.index for g in self._topology.gpus}
        return {
            uuid: (index.get(uuid, -1), user_shares(state.processes))
            for uuid, state in self._latest.items()
        }

    def granted(self, ledger: Ledger, active: Collection[Lease], lease: Lease, at: float) -> Lease:
        """The lease to record: as asked, or with a lower cap to fit the power budget
        (GpusUnavailable where it does not fit)."""
        lease = self.budget.fitted(active, lease, self.caps.in_force, self.drawers)
        self.energy.record(ledger, active, [lease], at)
        self.caps.granted(ledger, lease)
        return lease

    def fits(self, active: Collection[Lease], lease: Lease) -> Lease:
        """As `granted` would have it, recording nothing and reading no driver (a preview);
        OverBudget (budget.py) where it does not fit the power budget."""
        return self.budget.check(active, lease, self.caps.in_force, self.drawers)

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
