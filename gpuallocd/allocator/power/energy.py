"""Energy of leases and of unleased use, from the GPUs' energy counters (docs/accounting.md).

Each live sample reads every whole GPU's counter with the rest of its state, off the event
loop; the meter keeps the latest (its cache). Each physical GPU that a lease holds, or that a
process of a known owner uses, has a baseline: its counter at its last reading. A reading (at
a grant or an end on the GPU, and on the energy timer) takes the cached counter, so it costs
no driver call: the energy drawn since the baseline is charged by the parts of the parties
over that interval (`split.py`, averaged over the live samples by `presence.py`): a lease its
part (one row per lease per reading), each user without a lease on the GPU theirs, with the
GPU time of that part (one row per user per GPU, unleased use). A grant or an end thus closes
its GPU's interval at the last sample (at most `sample_interval_seconds` before it). A part
other than the whole GPU over the whole interval is an estimate. A counter that went back is
a driver reload: only what it counted since is taken, never negative energy. Baselines live
in memory: after a daemon restart the first reading starts them again, so a restart or a
reload loses at most the interval it fell in. A GPU without a counter (older than Volta)
gives no energy.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuallocd.allocator.power.presence import Presence, Taken
from gpuallocd.allocator.power.split import Holders, Parts, holders_by_gpu
from gpuallocd.host.users import user_name
from gpuallocd.model import Lease, LiveState
from gpuallocd.model.energy import EnergyUse

__all__ = ["EnergyMeter", "Reading", "charges"]

Interval = tuple[float, float]  # joules drawn, seconds between the readings


def charges(
    drawn: Mapping[str, Interval],
    parts: Mapping[str, Parts],
    leases: Iterable[Lease],
    at: float,
    name_of: Callable[[int], str] = user_name,
) -> list[EnergyUse]:
    """The rows of one reading (pure): each lease's part of the GPUs read, summed over its
    GPUs; each user's part of each GPU read that they used without a lease there."""
    uses = []
    for lease in leases:
        read = [uuid for uuid in dict.fromkeys(u.gpu_uuid for u in lease.gpus) if uuid in drawn]
        if not read:
            continue
        shares = [parts[uuid].leases.get(lease.id, 0.0) for uuid in read]
        joules = sum(drawn[uuid][0] * share for uuid, share in zip(read, shares, strict=True))
        estimate = any(share != 1.0 for share in shares)
        uses.append(EnergyUse(lease.id, lease.owner_uid, lease.owner_name, at, joules, estimate))
    for uuid, (joules, seconds) in drawn.items():
        for uid, share in sorted(parts[uuid].users.items()):
            if share > 0:
                use = EnergyUse(
                    None, uid, name_of(uid), at, joules * share, share != 1.0, seconds * share
                )
                uses.append(use)
    return uses


class EnergyMeter:
    """The latest counters, the baselines of the GPUs read, who used each since, and the
    energy each reading finds."""

    def __init__(self, enabled: bool) -> None:
        self._enabled = enabled
        self.counters: dict[str, int] = {}  # GPU -> its counter at the last sample, in mJ
        self._baselines: dict[str, tuple[int, float]] = {}  # GPU -> (counter in mJ, when)
        self.presence = Presence()

    @property
    def enabled(self) -> bool:
        return self._enabled

    def sampled(self, states: Mapping[str, LiveState], active: Iterable[Lease]) -> None:
        """A live sample: each GPU's counter, and who uses each GPU now with the leases that
        hold it. A GPU the sample could not read keeps its last counter."""
        if not self._enabled:
            return
        for uuid, state in states.items():
            if state.energy_mj is not None:
                self.counters[uuid] = state.energy_mj
        self.presence.sampled(states, holders_by_gpu(active))

    def drawn(self, gpus: Collection[str], at: float) -> dict[str, Interval]:
        """(joules, seconds) each GPU drew since its baseline, by the cached counters; the
        baselines move to now. A GPU read for the first time only gets a baseline; one
        without a counter gets none."""
        found: dict[str, Interval] = {}
        for uuid in gpus:
            counter = self.counters.get(uuid)
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
        self, active: Collection[Lease], gpus: Collection[str], at: float
    ) -> list[EnergyUse]:
        """Close the interval on `gpus` (and start one on those read for the first time):
        what each active lease on them, and each user without a lease there, drew. GPUs that
        no active lease holds and nobody used lose their baselines."""
        holders = holders_by_gpu(active)
        kept = set(holders) | self.presence.used() | set(gpus)
        for uuid in set(self._baselines) - kept:
            del self._baselines[uuid]
        self.presence.forget(set(self.presence.latest) - kept)
        found = self._close(gpus, holders, {lease.id: lease for lease in active}, at)
        return [] if found is None else found.uses()

    def _close(
        self,
        gpus: Collection[str],
        holders: Mapping[str, Holders],
        leases: Mapping[str, Lease],
        at: float,
    ) -> Reading | None:
        """The reading of the intervals `gpus` close now (`holders`: the leases on them)."""
        drawn = self.drawn(gpus, at) if gpus else {}
        taken = {}
        for uuid in gpus:
            on_gpu = holders.get(uuid)
            if uuid in drawn and (on_gpu or self.presence.has_users(uuid)):
                taken[uuid] = self.presence.take(uuid, on_gpu or {})
            else:  # read for the first time, or nobody's since: the interval starts now
                drawn.pop(uuid, None)
                self.presence.forget((uuid,))
        if not drawn:
            return None
        on_read = {lease_id for uuid in drawn for lease_id in holders.get(uuid, {})}
        on_them = tuple(lease for i, lease in leases.items() if i in on_read)
        return Reading(at, drawn, taken, on_them)

    def read(
        self, active: Collection[Lease], changed: Iterable[Lease], at: float
    ) -> Reading | None:
        """The reading of the GPUs of the `changed` leases, before they are granted or
        ended: their intervals close now (what each party drew is charged when it is
        recorded). Only those GPUs are looked at (the timer's reading forgets GPUs nobody
        holds or uses)."""
        if not self._enabled:
            return None
        gpus = {unit.gpu_uuid for lease in changed for unit in lease.gpus}
        on_them = [lease for lease in active if any(u.gpu_uuid in gpus for u in lease.gpus)]
        holders = holders_by_gpu(on_them)
        return self._close(gpus, holders, {lease.id: lease for lease in on_them}, at)

    def uses_of_all(self, active: Collection[Lease], at: float) -> list[EnergyUse]:
        """The timer's reading: every GPU a lease holds or a process of a known owner used
        since its last reading."""
        if not self._enabled:
            return []
        return self.reading(active, set(holders_by_gpu(active)) | self.presence.used(), at)


@dataclass(frozen=True, slots=True)
class Reading:
    """What one reading found: each GPU's energy and time since its previous reading, who
    was on it over that interval, and the leases holding it; charged when recorded."""

    at: float
    drawn: Mapping[str, Interval]
    taken: Mapping[str, Taken]
    leases: Sequence[Lease]

    def uses(self) -> list[EnergyUse]:
        """Its rows (`charges`)."""
        parts = {uuid: found.parts() for uuid, found in self.taken.items()}
        return charges(self.drawn, parts, self.leases, self.at)
