"""The allocator's view of the node: its topology, live state, and who holds which GPU.

It answers two questions from the leases it is given: what `status` shows for each GPU, and
the immutable snapshot a policy chooses from. It records nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

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
    draining: bool = False  # only processes of its last holder, whose lease ended, run on it
    reserved_for: dict[str, object] | None = None  # the first waiter that reserves it

    @property
    def state(self) -> str:
        if not self.live.healthy:
            return "unhealthy"
        if self.lease is not None:
            return "leased"
        if self.foreign_pids:
            return "draining" if self.draining else "in-use"
        return "reserved" if self.reserved_for is not None else "free"

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
            "reserved_for": self.reserved_for if self.state == "reserved" else None,
        }


def holders_of(leases: Iterable[Lease]) -> dict[str, Lease]:
    """The active lease of each leased GPU, by UUID."""
    return {uuid: lease for lease in leases for uuid in lease.uuids}


class NodeView:
    """The topology and the latest live sample; snapshots and statuses over given leases."""

    def __init__(self, topology: Topology) -> None:
        self._live: dict[str, LiveState] = {}
        self._last_holder: dict[str, int] = {}  # GPU -> uid whose lease on it ended last
        self._ignored: dict[str, frozenset[int]] = {}  # GPU -> pids root said to ignore
        self.adopt(topology)

    @property
    def topology(self) -> Topology:
        return self._topology

    def adopt(self, topology: Topology) -> None:
        """Take a (re)discovered topology."""
        self._topology = topology
        self._by_uuid = topology.by_uuid()

    def update_live(self, states: Mapping[str, LiveState]) -> None:
        self._live = dict(states)

    def gpu(self, uuid: str) -> Gpu:
        return self._by_uuid[uuid]

    def released(self, lease: Lease) -> None:
        """A lease ended: its GPUs drain while its owner's processes still run on them."""
        for uuid in lease.uuids:
            self._last_holder[uuid] = lease.owner_uid
            self._ignored.pop(uuid, None)

    def ignore_present_processes(self, uuid: str) -> None:
        """The admin's override: the processes on `uuid` now no longer keep it from use."""
        processes = self._live.get(uuid, HEALTHY).processes
        self._ignored[uuid] = frozenset(p.pid for p in processes)

    def _draining(self, uuid: str, foreign: tuple[int, ...]) -> bool:
        owner = self._last_holder.get(uuid)
        uids = {p.uid for p in self._live.get(uuid, HEALTHY).processes if p.pid in foreign}
        return owner is not None and uids == {owner}

    def statuses(
        self, leases: Iterable[Lease], reserved: Mapping[str, dict[str, object]] | None = None
    ) -> list[GpuStatus]:
        """Each GPU as `status` shows it; `reserved` names the waiter that holds a free one."""
        holders = holders_of(leases)
        reserved = reserved or {}
        statuses = []
        for gpu in self._topology.gpus:
            foreign = self._foreign_pids(gpu.uuid, holders.get(gpu.uuid))
            statuses.append(
                GpuStatus(
                    gpu=gpu,
                    live=self._live.get(gpu.uuid, HEALTHY),
                    lease=holders.get(gpu.uuid),
                    foreign_pids=foreign,
                    draining=self._draining(gpu.uuid, foreign),
                    reserved_for=reserved.get(gpu.uuid),
                )
            )
        return statuses

    def snapshot(
        self, leases: Iterable[Lease], reserved: frozenset[str] = frozenset()
    ) -> NodeSnapshot:
        """What a policy sees: leased and `reserved` GPUs busy, foreign use and health marked."""
        holders = holders_of(leases)
        foreign = frozenset(u for u in self._by_uuid if self._foreign_pids(u, holders.get(u)))
        return NodeSnapshot.from_busy(
            self._topology, busy=frozenset(holders) | reserved, live=self._live, foreign=foreign
        )

    def usable_gpus(self, spec: AllocateSpec) -> frozenset[str]:
        """Every GPU that could serve this request: the named ones, or any when it has a count."""
        required = frozenset(uuid for uuid in map(self._known_uuid, spec.gpus) if uuid)
        if spec.count is None or spec.count <= len(required):
            return required
        floor = spec.min_free_memory_bytes or 0  # a GPU smaller than that can never serve it
        return frozenset(
            uuid
            for uuid, gpu in self._by_uuid.items()
            if gpu.memory_total_bytes is None or gpu.memory_total_bytes >= floor
        )

    def _known_uuid(self, ref: str | int) -> str | None:
        try:
            return self._topology.resolve(ref)
        except UnknownGpu:
            return None

    def _foreign_pids(self, uuid: str, holder: Lease | None) -> tuple[int, ...]:
        """Processes on a GPU whose user holds no lease on it."""
        ignored = self._ignored.get(uuid, frozenset())
        processes = [p for p in self._live.get(uuid, HEALTHY).processes if p.pid not in ignored]
        allowed = {holder.owner_uid} if holder else set()
        # A process whose owner cannot be read (another PID namespace) counts against a free GPU
        # only: on a leased GPU it is most likely the holder's own job in a container.
        return tuple(
            p.pid
            for p in processes
            if (p.uid is None and holder is None) or (p.uid is not None and p.uid not in allowed)
        )
