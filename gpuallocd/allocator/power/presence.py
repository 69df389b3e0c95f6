"""Who used each GPU since its last energy reading, sample by sample.

Every live sample (each `sample_interval_seconds`) adds each GPU's parts at that sample
(`split.py`) to the GPU's sum and counts the sample. A reading of the GPU takes the mean over
the samples since its previous reading and starts the sum again, so the energy of an interval
is split by who used the GPU over the interval, not by the one sample that happened to come
last: a process stopped just before each reading still pays for the time it ran. A reading
that no sample preceded (two readings within one sample interval) takes the latest sample.

Memory: one entry per GPU. Work: per sample, the GPUs' processes and the active leases'
units, both already at hand; nothing is read from the driver or the ledger here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gpuallocd.allocator.power.split import Holders, Parts, sample_parts
from gpuallocd.model import GpuProcess, LiveState

__all__ = ["Presence", "Taken"]


@dataclass(frozen=True, slots=True)
class Taken:
    """What one GPU's interval saw: its samples' parts summed and counted, the latest
    sample's processes, and the leases that held it. Turned into parts when charged (the
    record's work, not the grant's or the end's)."""

    summed: Parts | None
    samples: int
    latest: tuple[GpuProcess, ...]
    holders: Holders

    def parts(self) -> Parts:
        """The parties' parts over the interval: the mean of its samples, or the latest
        sample's where none came (two readings within one sample interval)."""
        if self.samples == 0 or self.summed is None:
            found = sample_parts(self.latest, self.holders)
        else:
            found = self.summed.mean(self.samples)
        found.leases = {i: part for i, part in found.leases.items() if i in self.holders}
        return found


class Presence:
    """Each GPU's summed parts and sample count since its last reading, and its latest sample."""

    def __init__(self) -> None:
        self._sums: dict[str, Parts] = {}
        self._samples: dict[str, int] = {}
        self._used: set[str] = set()  # a process of a known owner on it since its last reading
        self.latest: dict[str, tuple[GpuProcess, ...]] = {}

    def sampled(self, states: Mapping[str, LiveState], holders: Mapping[str, Holders]) -> None:
        """Add one live sample (of every GPU); `holders`: the leases on each GPU now."""
        self.latest = {uuid: state.processes for uuid, state in states.items()}
        for uuid, state in states.items():
            processes = state.processes
            self._samples[uuid] = self._samples.get(uuid, 0) + 1
            if any(p.uid is not None for p in processes):
                self._used.add(uuid)
            on_gpu = holders.get(uuid, {})
            if processes or on_gpu:
                self._sums.setdefault(uuid, Parts()).add(sample_parts(processes, on_gpu))

    def used(self) -> set[str]:
        """The GPUs a process of a known owner used since their last reading, or uses now."""
        now = {u for u, found in self.latest.items() if any(p.uid is not None for p in found)}
        return self._used | now

    def has_users(self, uuid: str) -> bool:
        """Whether a process of a known owner used `uuid` since its last reading, or now."""
        return uuid in self._used or any(p.uid is not None for p in self.latest.get(uuid, ()))

    def take(self, uuid: str, holders: Holders) -> Taken:
        """What `uuid`'s interval saw, which starts again now; only the leases of `holders`
        (those that held it over the interval) keep their parts (`Taken.parts`)."""
        self._used.discard(uuid)
        summed = self._sums.pop(uuid, None)
        samples = self._samples.pop(uuid, 0)
        return Taken(summed, samples, self.latest.get(uuid, ()), holders)

    def forget(self, uuids: Collection[str]) -> None:
        """Start the interval of GPUs nobody holds or used again (their baselines went)."""
        for uuid in uuids:
            self._sums.pop(uuid, None)
            self._samples.pop(uuid, None)
            self._used.discard(uuid)
