"""Which GPUs are shared by memory, and what their shares may sum to; who holds what where.

`shared_gpus` names GPUs by index or UUID, or is `["all"]`. A GPU in MIG mode is never
shared (its instances are leased instead), nor one whose memory size is unknown. A shared
GPU's shares may sum to its memory less `share_memory_reserve_bytes`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpuallocd.errors import UnknownGpu
from gpuallocd.model import Lease, LeasedGpu, Topology, UnitKind

__all__ = ["UnitHolders", "share_capacity"]

log = logging.getLogger(__name__)


def _shared_uuids(topology: Topology, shared: Sequence[str]) -> list[str]:
    if any(ref.strip().lower() == "all" for ref in shared):
        return list(topology.uuids())
    found = []
    for ref in shared:
        try:
            found.append(topology.resolve(ref))
        except UnknownGpu:
            log.warning("shared_gpus names %r, which this node does not have", ref)
    return found


def share_capacity(topology: Topology, shared: Sequence[str], reserve_bytes: int) -> dict[str, int]:
    """The memory the shares of each shared GPU may sum to, by UUID."""
    by_uuid = topology.by_uuid()
    capacity = {}
    for uuid in _shared_uuids(topology, shared):
        gpu = by_uuid[uuid]
        if gpu.mig_mode or gpu.memory_total_bytes is None:
            log.warning("GPU %d is not shared: %s", gpu.index, _why_not(gpu.mig_mode))
            continue
        capacity[uuid] = max(gpu.memory_total_bytes - reserve_bytes, 0)
    return capacity


def _why_not(mig_mode: bool) -> str:
    return "it is in MIG mode" if mig_mode else "its memory size is unknown"


@dataclass
class UnitHolders:
    """The active leases of a node sorted by what they hold: whole GPUs, instances, shares."""

    whole: dict[str, Lease] = field(default_factory=dict)  # GPU UUID -> lease
    instances: dict[str, Lease] = field(default_factory=dict)  # MIG UUID -> lease
    shares: dict[str, list[tuple[Lease, LeasedGpu]]] = field(default_factory=dict)

    @classmethod
    def of(cls, leases: Iterable[Lease]) -> UnitHolders:
        holders = cls()
        for lease in leases:
            for unit in lease.gpus:
                if unit.kind is UnitKind.SHARE:
                    holders.shares.setdefault(unit.gpu_uuid, []).append((lease, unit))
                elif unit.kind is UnitKind.MIG:
                    holders.instances[unit.uuid] = lease
                else:
                    holders.whole[unit.uuid] = lease
        return holders

    def share_used(self) -> dict[str, int]:
        return {
            uuid: sum(unit.memory_bytes or 0 for _, unit in held)
            for uuid, held in self.shares.items()
        }

    def owners_on(self, gpu_uuid: str, instance_uuids: Iterable[str]) -> set[int]:
        """The uids of everyone holding any part of one GPU."""
        owners = {lease.owner_uid for lease, _ in self.shares.get(gpu_uuid, [])}
        owners |= {self.instances[u].owner_uid for u in instance_uuids if u in self.instances}
        if gpu_uuid in self.whole:
            owners.add(self.whole[gpu_uuid].owner_uid)
        return owners
