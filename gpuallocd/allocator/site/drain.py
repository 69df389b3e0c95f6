"""Drained GPUs: taken out of service by an admin, kept across restarts in the ledger.

A drained GPU gets no new lease; a lease already on it runs to its end (`status` shows the
GPU `draining` while it is leased, `drained` once free). The board is the in-memory copy of
the ledger's `drains` table, changed only after the ledger has recorded the change.

A drain is kept under the GPU's UUID and covers every unit of that GPU: its MIG instances,
and, on an AMD GPU split into compute partitions, every partition of it (a drain of the
GPU's first partition, whose UUID names the physical GPU). `covered` is what allocation
looks at, so no request reaches a drained GPU through one of its parts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuallocd.errors import GpuBusy
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller, Drain, Topology

__all__ = ["DrainBoard"]


class DrainBoard:
    """Which GPUs are drained, by whom and why."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._drains = {d.gpu_uuid: d for d in ledger.drains()}

    @property
    def drains(self) -> Mapping[str, Drain]:
        return self._drains

    def uuids(self) -> frozenset[str]:
        return frozenset(self._drains)

    def covered(self, topology: Topology) -> dict[str, str]:
        """Every unit a drain covers (the drained GPUs, their instances and partitions),
        each with the drained GPU's UUID."""
        if not self._drains:
            return {}
        found = {uuid: uuid for uuid in self._drains}
        for gpu in topology.gpus:
            if gpu.partition_of in self._drains:
                found[gpu.uuid] = gpu.partition_of
            if gpu.uuid in self._drains:
                found.update((m.uuid, gpu.uuid) for m in gpu.mig_devices)
        return found

    def reload(self) -> None:
        self._drains = {d.gpu_uuid: d for d in self._ledger.drains()}

    def check_not_drained(self, uuids: Sequence[str], topology: Topology) -> None:
        """GpuBusy when a unit asked for by name is drained, or on a drained GPU (it may be
        undrained later)."""
        covered = self.covered(topology)
        drained = [u for u in uuids if u in covered]
        if drained:
            drains = [self._drains[covered[u]] for u in drained]
            reasons = "; ".join(f"{u}: {d.reason}" for u, d in zip(drained, drains, strict=True))
            raise GpuBusy(
                f"drained by an admin ({reasons})",
                gpus=drained,
                quoted=[{"by": d.by, "by_uid": d.by_uid, "text": d.reason} for d in drains],
            )

    def drain(self, uuids: Sequence[str], caller: Caller, reason: str, now: float) -> list[Drain]:
        """Drain these GPUs (a GPU drained already takes the new reason)."""
        drains = [Drain(u, reason, caller.user, caller.uid, now) for u in dict.fromkeys(uuids)]
        self._ledger.drain(drains)
        self._drains.update((d.gpu_uuid, d) for d in drains)
        return drains

    def undrain(self, uuids: Sequence[str], caller: Caller, now: float) -> list[str]:
        """Put these GPUs back in service; the UUIDs that were drained."""
        undrained = [u for u in dict.fromkeys(uuids) if u in self._drains]
        self._ledger.undrain(undrained, caller.uid, caller.user, now)
        for uuid in undrained:
            del self._drains[uuid]
        return undrained
