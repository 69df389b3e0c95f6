"""What a lease does to its GPUs besides holding them: it must fit the box's power budget
(budget.py), its energy is read (energy.py) and its power cap set and put back (caps.py).
The lifecycle calls `granted` and `ending` in the transaction of the change: they return the
rows to write with it (one transaction, no driver call: readings come from the last sample's
cache, limits from what the daemon last set or read); once it is committed the caps follow,
told as an observer. The energy a grant or an end reads is kept once the change is committed
(`unrecorded`) and written with the next ones, within RECORD_WITHIN_SECONDS, in one
transaction for all (desks/energy.py): an energy row in each change's own commit would add its
table's and its indexes' pages to every pair. Each live sample is told too (`sampled`):
each GPU's energy counter, and who uses it, which splits its energy and names who draws
without a lease when the budget refuses."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from gpuallocd.allocator.power.budget import Drawers, PowerBudget
from gpuallocd.allocator.power.caps import PowerCaps
from gpuallocd.allocator.power.energy import EnergyMeter, Reading
from gpuallocd.allocator.power.split import user_shares
from gpuallocd.ledger import Ledger
from gpuallocd.ledger.hot import Step
from gpuallocd.model import Lease, LiveState, Topology
from gpuallocd.model.energy import EnergyUse

__all__ = ["RECORD_WITHIN_SECONDS", "LeaseHardware"]

RECORD_WITHIN_SECONDS = 1.0  # a grant's or an end's energy is written within this


def _nobody() -> None:
    return None


class LeaseHardware:
    """The energy meter and the power caps of one node (neither does anything without NVML)."""

    def __init__(
        self,
        energy: EnergyMeter | None = None,
        caps: PowerCaps | None = None,
        budget: PowerBudget | None = None,
    ) -> None:
        self.energy = energy or EnergyMeter(enabled=False)
        self.caps = caps or PowerCaps(None)
        self.budget = budget or PowerBudget(None, "wait")
        self._latest: Mapping[str, LiveState] = {}  # the last live sample
        self._staged: list[Reading] = []  # read by the changes of the commit under way
        self.unrecorded: list[Reading] = []  # read by committed changes, not written yet
        self.record_soon: Callable[[], None] = _nobody  # desks/energy.py writes them
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

    def granted(
        self, active: Collection[Lease], lease: Lease, at: float
    ) -> tuple[Lease, list[Step], dict[str, int]]:
        """The lease to record (as asked, or with a lower cap to fit the power budget;
        GpusUnavailable where it does not fit; its cap as the cards take it), the rows to
        record with it, and each GPU's cap in mW (for its units' rows)."""
        lease = self.budget.fitted(active, lease, self.caps.in_force, self.drawers)
        self._stage(self.energy.read(active, [lease], at))
        steps = self.caps.granted(lease, at)
        return self.caps.as_set(lease), steps, self.caps.unit_caps(lease.id)

    def refused(self, lease: Lease) -> None:
        """The ledger refused the grant of `lease` after `granted`: its caps' changes undone
        (the energy it read stays to be recorded: the interval it closed was drawn)."""
        self.caps.refused(lease.id)

    def check_at_arrival(
        self,
        count: int,
        asked_watts: float | None,
        required: Collection[str],
        gpus: Collection[str],
    ) -> None:
        """OverPowerBudget where no `count` of `gpus` could ever fit the power budget
        (budget.py): said when a request arrives, before it waits for GPUs."""
        self.budget.check_at_arrival(count, asked_watts, required, gpus)

    def fits(self, active: Collection[Lease], lease: Lease) -> Lease:
        """As `granted` would have it, recording nothing and reading no driver (a preview);
        OverBudget (budget.py) where it does not fit the power budget."""
        return self.budget.check(active, lease, self.caps.in_force, self.drawers)

    def ending(self, active: Collection[Lease], leases: Sequence[Lease], at: float) -> list[Step]:
        """The rows the end of `leases` writes with it (caps' records of limits put back)."""
        self._stage(self.energy.read(active, leases, at))
        return self.caps.ending(leases)

    def _stage(self, reading: Reading | None) -> None:
        if reading is not None:
            self._staged.append(reading)

    def reload(self, ledger: Ledger, active: Collection[str]) -> None:
        """After a failed commit (or at start): what the ledger holds of caps, again;
        `active`: the ids of the active leases. Energy read in the failed one is dropped."""
        self._staged = []
        self.caps.reload(ledger, active)

    def as_recorded(self, lease: Lease) -> Lease:
        """A lease read back from the ledger, with the power cap its records say it has."""
        return self.caps.as_recorded(lease)

    def take_unrecorded(self) -> list[EnergyUse]:
        """The rows of the energy committed changes read, not written yet (to write now)."""
        taken, self.unrecorded = self.unrecorded, []
        return [use for reading in taken for use in reading.uses()]

    # After the commit (allocator/observer.py) ------------------------------------------------

    def lease_granted(self, lease: Lease) -> None:
        self.caps.lease_granted(lease)

    def lease_ended(self, lease: Lease) -> None:
        self.caps.lease_ended(lease)

    def commit_published(self) -> None:
        self.caps.commit_published()
        if self._staged:
            first = not self.unrecorded
            self.unrecorded += self._staged
            self._staged = []
            if first:
                self.record_soon()

    def allocation_finished(self, seconds: float, *, waited: bool, outcome: str) -> None:
        return None
