"""The allocator's view of the node: its topology, live state, and who holds which GPU.

It answers two questions from the leases it is given: what `status` shows for each GPU, and
the immutable snapshot a policy chooses from. It records nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuallocd.allocator.leases.choices import SNAPSHOTS_KEPT, LruCache, StateKey
from gpuallocd.allocator.leases.sharing import UnitHolders
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.errors import UnknownGpu
from gpuallocd.model import HEALTHY, Drain, Gpu, Lease, LeasedGpu, LiveState, MigDevice, Topology
from gpuallocd.policies import GpuView, NodeSnapshot

# Every state GpuStatus.state may take; metrics export a series for each, so add new ones here.
GPU_STATES = (
    "free",
    "leased",
    "in-use",
    "unhealthy",
    "lost",
    "mig",
    "shared",
    "reserved",
    "draining",
    "drained",
)

__all__ = ["GPU_STATES", "GpuStatus", "Hold", "NodeView"]


def _holder(lease: Lease | None) -> dict[str, object] | None:
    return {"uid": lease.owner_uid, "user": lease.owner_name} if lease else None


@dataclass(frozen=True, slots=True)
class Hold:
    """A free GPU held for a waiter (a queue hold; an advance reservation is an
    `AdvanceReservation`): nobody behind it in the queue may take it."""

    waiter_id: str
    position: int  # in the queue, from 1
    uid: int
    user: str

    def to_json(self) -> dict[str, object]:
        return {
            "waiter": self.waiter_id,
            "position": self.position,
            "uid": self.uid,
            "user": self.user,
        }


@dataclass(frozen=True, slots=True)
class GpuStatus:
    """One GPU as `status` shows it: the GPU, what it is doing, and its lease if any.

    A GPU in MIG mode lists its `instances` (each with its lease); a shared GPU its
    `shares` (each lease with the memory it holds) and `share_capacity_bytes`.
    """

    gpu: Gpu
    live: LiveState
    lease: Lease | None
    foreign_pids: tuple[int, ...] = field(default=())
    instances: tuple[tuple[MigDevice, Lease | None], ...] = ()
    shares: tuple[tuple[Lease, LeasedGpu], ...] = ()
    share_capacity_bytes: int | None = None
    held_for: Hold | None = None
    drain: Drain | None = None
    lingering: bool = False  # only processes of its last holder, whose lease ended, run on it

    @property
    def state(self) -> str:
        if self.drain is not None:  # an admin's drain: `draining` until its lease ends
            return "draining" if self.lease is not None else "drained"
        if not self.live.healthy:
            return "lost" if self.live.lost else "unhealthy"
        if self.lease is not None:
            return "leased"
        if self.gpu.mig_mode:
            return "mig"
        if self.shares:
            return "shared"
        if self.foreign_pids:  # a former holder's processes still running: draining
            return "draining" if self.lingering else "in-use"
        return "reserved" if self.held_for is not None else "free"

    def _foreign_processes(self) -> list[dict[str, object]]:
        uids = {p.pid: p.uid for p in self.live.processes}
        return [{"pid": pid, "uid": uids.get(pid)} for pid in self.foreign_pids]

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
            "lost": self.live.lost,
            "health_reason": self.live.health_reason,
            "foreign_pids": list(self.foreign_pids),
            "foreign_processes": self._foreign_processes(),
            "reserved_for": self.held_for.to_json() if self.held_for else None,
            "lease_id": lease.id if lease else None,
            "holder": _holder(lease),
            "expires_at": lease.expires_at if lease else None,
            "mig_mode": self.gpu.mig_mode,
            "partition_of": self.gpu.partition_of,
            "instances": [_instance_json(mig, held) for mig, held in self.instances],
            "share_capacity_bytes": self.share_capacity_bytes,
            "shares": [_share_json(held, unit) for held, unit in self.shares],
            "label": lease.label if lease else None,
            "drain": self.drain.to_json() if self.drain else None,
        }


def _instance_json(mig: MigDevice, lease: Lease | None) -> dict[str, object]:
    return {
        "uuid": mig.uuid,
        "mig_profile": mig.profile,
        "memory_total_bytes": mig.memory_total_bytes,
        "state": "leased" if lease else "free",
        "lease_id": lease.id if lease else None,
        "label": lease.label if lease else None,
        "holder": _holder(lease),
        "expires_at": lease.expires_at if lease else None,
    }


def _share_json(lease: Lease, unit: LeasedGpu) -> dict[str, object]:
    return {
        "lease_id": lease.id,
        "label": lease.label,
        "holder": _holder(lease),
        "memory_bytes": unit.memory_bytes,
        "expires_at": lease.expires_at,
    }


class NodeView:
    """The topology and the latest live sample; snapshots and statuses over given leases."""

    def __init__(self, topology: Topology) -> None:
        self._live: dict[str, LiveState] = {}
        self.share_capacity: dict[str, int] = {}
        self._epoch = 0  # changes with the topology or the live sample
        self._snapshots: LruCache[StateKey, NodeSnapshot] = LruCache(SNAPSHOTS_KEPT)
        self._last_holder: dict[str, int] = {}  # GPU -> uid whose lease on it ended last
        self._ignored: dict[str, frozenset[int]] = {}  # GPU -> pids root said to ignore
        self.adopt(topology)

    @property
    def topology(self) -> Topology:
        return self._topology

    def adopt(self, topology: Topology, share_capacity: Mapping[str, int] | None = None) -> None:
        """Take a (re)discovered topology, and the memory each shared GPU may share out."""
        self._topology = topology
        self._by_uuid = topology.by_uuid()
        self._instances = topology.instances()
        self.share_capacity = dict(share_capacity or {})
        self._new_epoch()

    def update_live(self, states: Mapping[str, LiveState]) -> None:
        if states != self._live:
            self._live = dict(states)
            self._new_epoch()

    def _new_epoch(self) -> None:
        self._epoch += 1
        self._snapshots.clear()
        self._views: dict[tuple[str, bool, bool], GpuView] = {}
        # The GPUs the live sample shows processes on, for every snapshot of this epoch.
        self._with_processes = tuple(g for g in self._topology.gpus if self.live(g.uuid).processes)

    def live(self, uuid: str) -> LiveState:
        return self._live.get(uuid, HEALTHY)

    def gpu(self, uuid: str) -> Gpu:
        return self._by_uuid[uuid]

    def released(self, lease: Lease) -> None:
        """A lease ended: its GPUs drain while its owner's processes still run on them."""
        for uuid in lease.uuids:
            self._last_holder[uuid] = lease.owner_uid
            self._ignored.pop(uuid, None)

    def ignore_present_processes(self, uuid: str) -> None:
        """The admin's override: the processes on `uuid` now no longer keep it from use."""
        self._ignored[uuid] = frozenset(p.pid for p in self.live(uuid).processes)
        self._new_epoch()

    def _lingering(self, uuid: str, foreign: tuple[int, ...]) -> bool:
        owner = self._last_holder.get(uuid)
        uids = {p.uid for p in self.live(uuid).processes if p.pid in foreign}
        return owner is not None and uids == {owner}

    def statuses(
        self,
        leases: Iterable[Lease],
        holds: Mapping[str, Hold] | None = None,
        drains: Mapping[str, Drain] | None = None,
    ) -> list[GpuStatus]:
        """Each GPU's status; `holds` are the GPUs held for waiters (or for an advance
        reservation), `drains` the GPUs an admin took out of service, both by UUID."""
        holders = UnitHolders.of(leases)
        reserved = holds or {}
        drains = drains or {}
        statuses = []
        for gpu in self._topology.gpus:
            foreign = self._foreign_pids(gpu, holders)
            statuses.append(
                GpuStatus(
                    gpu=gpu,
                    live=self.live(gpu.uuid),
                    lease=holders.whole.get(gpu.uuid),
                    foreign_pids=foreign,
                    instances=tuple(
                        (m, holders.instances.get(m.uuid)) for m in gpu.mig_devices if gpu.mig_mode
                    ),
                    shares=tuple(holders.shares.get(gpu.uuid, ())),
                    share_capacity_bytes=self.share_capacity.get(gpu.uuid),
                    held_for=reserved.get(gpu.uuid),
                    drain=drains.get(gpu.uuid),
                    lingering=self._lingering(gpu.uuid, foreign),
                )
            )
        return statuses

    def snapshot(
        self, leases: Iterable[Lease], reserved: frozenset[str] = frozenset()
    ) -> NodeSnapshot:
        """What a policy sees: leased, shared and `reserved` GPUs busy, foreign use and health
        marked; leased and reserved MIG instances busy; the room each shared GPU has left."""
        return self.keyed_snapshot(leases, reserved)[1]

    def keyed_snapshot(
        self, leases: Iterable[Lease], reserved: frozenset[str] = frozenset()
    ) -> tuple[StateKey, NodeSnapshot]:
        """The snapshot and the key of the state it shows; one snapshot per state is kept."""
        holders = UnitHolders.of(leases)
        foreign = frozenset(g.uuid for g in self._with_processes if self._foreign_pids(g, holders))
        busy = frozenset(holders.whole) | frozenset(holders.shares) | reserved
        busy_units = frozenset(holders.instances) | reserved
        share_used = holders.share_used()
        key: StateKey = (
            self._epoch,
            busy,
            foreign,
            busy_units,
            frozenset(share_used.items()),
        )
        return key, self._snapshots.get_or_make(
            key, lambda: self._make_snapshot(busy, foreign, busy_units, share_used)
        )

    def _make_snapshot(
        self,
        busy: frozenset[str],
        foreign: frozenset[str],
        busy_units: frozenset[str],
        share_used: Mapping[str, int],
    ) -> NodeSnapshot:
        views = {
            gpu.uuid: self._view(gpu, gpu.uuid not in busy, gpu.uuid in foreign)
            for gpu in self._topology.gpus
        }
        return NodeSnapshot(
            topology=self._topology,
            views=views,
            busy_units=busy_units,
            share_capacity=self.share_capacity,
            share_used=share_used,
        )

    def _view(self, gpu: Gpu, unleased: bool, foreign_use: bool) -> GpuView:
        """One GPU as policies see it; at most four per GPU in an epoch, each made once."""
        key = (gpu.uuid, unleased, foreign_use)
        view = self._views.get(key)
        if view is None:
            view = self._views[key] = GpuView(
                gpu=gpu,
                free=unleased and not gpu.mig_mode,
                live=self.live(gpu.uuid),
                foreign_use=foreign_use,
            )
        return view

    def usable_gpus(self, spec: AllocateSpec) -> frozenset[str]:
        """Every unit that could serve this request: the named ones; else every GPU (or, for
        MIG instances, every instance of the profile; for shares, every shared GPU)."""
        instances = self._instances
        named = frozenset(u for u in map(self._known_unit, spec.gpus) if u)
        if spec.count is None or spec.count <= len(named):
            return named
        if spec.mig_profile is not None or any(u in instances for u in named):
            return frozenset(
                u for u, (_, m) in instances.items() if spec.mig_profile in (None, m.profile)
            )
        if spec.memory_bytes is not None:
            return frozenset(self.share_capacity)
        floor = spec.min_free_memory_bytes or 0  # a GPU smaller than that can never serve it
        return frozenset(
            uuid
            for uuid, gpu in self._by_uuid.items()
            if gpu.memory_total_bytes is None or gpu.memory_total_bytes >= floor
        )

    def _known_unit(self, ref: str | int) -> str | None:
        if str(ref) in self._instances:
            return str(ref)
        try:
            return self._topology.resolve(ref)
        except UnknownGpu:
            return None

    def _foreign_pids(self, gpu: Gpu, holders: UnitHolders) -> tuple[int, ...]:
        """Processes on a GPU whose user holds no lease on any part of it (less those root
        said to ignore)."""
        ignored = self._ignored.get(gpu.uuid, frozenset())
        processes = [p for p in self.live(gpu.uuid).processes if p.pid not in ignored]
        allowed = holders.owners_on(gpu.uuid, (m.uuid for m in gpu.mig_devices))
        # A process whose owner cannot be read (another PID namespace) counts against a free GPU
        # only: on a leased GPU it is most likely the holder's own job in a container.
        return tuple(
            p.pid
            for p in processes
            if (p.uid is None and not allowed) or (p.uid is not None and p.uid not in allowed)
        )
