"""Energy of leases, from the GPUs' energy counters (docs/accounting.md).

Each physical GPU under an active lease has a baseline: its counter at the last reading. A
reading (at a grant or an end on the GPU, and on the energy timer) takes the energy drawn
since then and splits it among the leases that held the GPU over that interval: all of it
to a whole-GPU lease (measured); to a share or a MIG instance its fraction of the GPU (its
memory over the GPU's: an estimate). A counter that went back is a driver reload: only what
it counted since is taken, never negative energy. Baselines live in memory: after a daemon
restart the first reading starts them again, so a restart or a reload loses at most the
interval it fell in. A GPU without a counter (older than Volta) gives no energy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping

from gpuallocd.allocator.power.unleased_energy import Interval, split_unleased
from gpuallocd.errors import GpuallocError
from gpuallocd.ledger import Ledger
from gpuallocd.model import Lease, PowerReading, UnitKind
from gpuallocd.model.energy import EnergyUse

__all__ = ["EnergyMeter", "PowerRead", "split_energy"]

log = logging.getLogger(__name__)

PowerRead = Callable[[Collection[str]], Mapping[str, PowerReading]]


def split_energy(drawn: Mapping[str, float], leases: Iterable[Lease], at: float) -> list[EnergyUse]:
    """Each lease's part of the joules `drawn` per physical GPU (pure)."""
    uses = []
    for lease in leases:
        parts = [(drawn[u.gpu_uuid], u) for u in lease.gpus if u.gpu_uuid in drawn]
        if not parts:
            continue
        joules = sum(gpu_joules * unit.fraction for gpu_joules, unit in parts)
        estimate = any(unit.kind is not UnitKind.WHOLE for _, unit in parts)
        uses.append(EnergyUse(lease.id, lease.owner_uid, lease.owner_name, at, joules, estimate))
    return uses


class EnergyMeter:
    """Baselines of the GPUs under leases, and the energy each reading finds."""

    def __init__(self, read: PowerRead | None) -> None:
        self._read = read
        self._baselines: dict[str, tuple[int, float]] = {}  # GPU -> (counter in mJ, when)

    @property
    def enabled(self) -> bool:
        return self._read is not None

    def drawn(self, gpus: Collection[str], at: float) -> dict[str, Interval]:
        """(joules, seconds) each GPU drew since its baseline; the baselines move to now. A
        GPU read for the first time (or without a counter) only gets a baseline (or loses it)."""
        if self._read is None or not gpus:
            return {}
        try:
            readings = self._read(gpus)
        except GpuallocError as exc:  # energy never stops a grant or an end
            log.warning("reading the GPUs' energy counters failed: %s", exc.message)
            return {}
        found: dict[str, Interval] = {}
        for uuid in gpus:
            reading = readings.get(uuid)
            counter = None if reading is None else reading.energy_mj
            previous = self._baselines.pop(uuid, None)
            if counter is None:
                continue
            self._baselines[uuid] = (counter, at)
            if previous is not None:
                before, since = previous
                millijoules = counter - before if counter >= before else counter
                found[uuid] = (millijoules / 1000, max(0.0, at - since))
        return found

    def reading(
        self,
        active: Collection[Lease],
        gpus: Collection[str],
        at: float,
        unleased: Mapping[str, Mapping[int, float]] | None = None,
    ) -> list[EnergyUse]:
        """Close the interval on `gpus` (and start one on those read for the first time):
        what each active lease on them drew, and the `unleased` GPUs' owners (GPU -> {uid:
        part}). Baselines of GPUs neither read now nor held by an active lease are dropped."""
        unleased = unleased or {}
        wanted = set(gpus) | set(unleased)
        held = {unit.gpu_uuid for lease in active for unit in lease.gpus}
        for uuid in set(self._baselines) - held - wanted:
            del self._baselines[uuid]
        drawn = self.drawn(wanted, at)
        if not drawn:
            return []
        joules = {uuid: interval[0] for uuid, interval in drawn.items()}
        return split_energy(joules, active, at) + split_unleased(drawn, unleased, at)

    def record(
        self,
        ledger: Ledger,
        active: Collection[Lease],
        changed: Iterable[Lease],
        at: float,
        unleased: Mapping[str, Mapping[int, float]] | None = None,
    ) -> None:
        """Read the GPUs of the `changed` leases before they are granted or ended (the
        timer: of all), and record what the active leases on them, and the owners of unleased
        use, drew (in the transaction of the change)."""
        if self._read is not None:
            gpus = {unit.gpu_uuid for lease in changed for unit in lease.gpus}
            ledger.record_energy(self.reading(active, gpus, at, unleased))
