"""The allocator's view of the node: its topology, live state, and who holds which GPU.

It answers two questions from the leases it is given: what `status` shows for each GPU, and
the immutable snapshot a policy chooses from. It records nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuallocd.allocator.choices import SNAPSHOTS_KEPT, LruCache, StateKey
from gpuallocd.allocator.specs import AllocateSpec
from gpuallocd.errors import UnknownGpu
from gpuallocd.model import HEALTHY, Gpu, Lease, LiveState, Topology
from gpuallocd.policies import NodeSnapshot

__all__ = ["GpuStatus", "NodeView"]


@dataclass(frozen=True, slots=True)
class GpuStatus:
    """One GPU as `status` shows it: the GPU, what it is doing, and its lease if any."""

    gpu: Gpu
    live: LiveState
    lease: Lease | None
    foreign_pids: tuple[int, ...] = field(default=())

    @property
    def state(self) -> str:
        if not self.live.healthy:
            return "unhealthy"
        if self.lease is not None:
            return "leased"
        return "in-use" if self.foreign_pids else "free"

    def to_json(self) -> dict[str, object]:
        lease = self.lease
        return {
            "index": self.gpu.index,
            "uuid": self.gpu.uuid,
            "name": self.gpu.name,
            "pci_bus_id": self.gpu.pci_bus_id,
            "memory_total_bytes": self.gpu.memory_total_bytes,
            "memory_used_bytes": self.live.memory_used_bytes,
            "utilization_percent": self.live.utilization_percent,
            "numa_node": self.gpu.numa_node,
            "state": self.state,
            "healthy": self.live.healthy,
            "health_reason": self.live.health_reason,
            "foreign_pids": list(self.foreign_pids),
            "lease_id": lease.id if lease else None,
            "holder": {"uid": lease.owner_uid, "user": lease.owner_name} if lease else None,
            "expires_at": lease.expires_at if lease else None,
        }


def holders_of(leases: Iterable[Lease]) -> dict[str, Lease]:
    """The active lease of each leased GPU, by UUID."""
    return {uuid: lease for lease in leases for uuid in lease.uuids}


class NodeView:
    """The topology and the latest live sample; snapshots and statuses over given leases."""

    def __init__(self, topology: Topology) -> None:
        self._live: dict[str, LiveState] = {}
        self._epoch = 0  # changes with the topology or the live sample
        self._snapshots: LruCache[StateKey, NodeSnapshot] = LruCache(SNAPSHOTS_KEPT)
        self.adopt(topology)

    @property
    def topology(self) -> Topology:
        return self._topology

    def adopt(self, topology: Topology) -> None:
        """Take a (re)discovered topology."""
        self._topology = topology
        self._by_uuid = topology.by_uuid()
        self._new_epoch()

    def update_live(self, states: Mapping[str, LiveState]) -> None:
        if states != self._live:
            self._live = dict(states)
            self._new_epoch()

    def _new_epoch(self) -> None:
        self._epoch += 1
        self._snapshots.clear()

    def gpu(self, uuid: str) -> Gpu:
        return self._by_uuid[uuid]

    def statuses(self, leases: Iterable[Lease]) -> list[GpuStatus]:
        holders = holders_of(leases)
        return [
            GpuStatus(
                gpu=gpu,
                live=self._live.get(gpu.uuid, HEALTHY),
                lease=holders.get(gpu.uuid),
                foreign_pids=self._foreign_pids(gpu.uuid, holders.get(gpu.uuid)),
            )
            for gpu in self._topology.gpus
        ]

    def snapshot(
        self, leases: Iterable[Lease], reserved: frozenset[str] = frozenset()
    ) -> NodeSnapshot:
        """What a policy sees: leased and `reserved` GPUs busy, foreign use and health marked."""
        return self.keyed_snapshot(leases, reserved)[1]

    def keyed_snapshot(
        self, leases: Iterable[Lease], reserved: frozenset[str] = frozenset()
    ) -> tuple[StateKey, NodeSnapshot]:
        """The snapshot and the key of the state it shows; one snapshot per state is kept."""
        holders = holders_of(leases)
        in_use = (u for u, live in self._live.items() if live.processes and u in self._by_uuid)
        foreign = frozenset(u for u in in_use if self._foreign_pids(u, holders.get(u)))
        key = (self._epoch, frozenset(holders) | reserved, foreign)
        return key, self._snapshots.get_or_make(
            key,
            lambda: NodeSnapshot.from_busy(
                self._topology, busy=key[1], live=self._live, foreign=foreign
            ),
        )

    def usable_gpus(self, spec: AllocateSpec) -> frozenset[str]:
        """Every GPU that could serve this request: the named ones, or any when it has a count."""
        required = frozenset(uuid for uuid in map(self._known_uuid, spec.gpus) if uuid)
        if spec.count is None or spec.count <= len(required):
            return required
        return frozenset(self._by_uuid)

    def _known_uuid(self, ref: str | int) -> str | None:
        try:
            return self._topology.resolve(ref)
        except UnknownGpu:
            return None

    def _foreign_pids(self, uuid: str, holder: Lease | None) -> tuple[int, ...]:
        """Processes on a GPU whose user holds no lease on it."""
        processes = self._live.get(uuid, HEALTHY).processes
        allowed = {holder.owner_uid} if holder else set()
        # A process whose owner cannot be read (another PID namespace) counts against a free GPU
        # only: on a leased GPU it is most likely the holder's own job in a container.
        return tuple(
            p.pid
            for p in processes
            if (p.uid is None and holder is None) or (p.uid is not None and p.uid not in allowed)
        )
