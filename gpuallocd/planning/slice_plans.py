"""Slices and shares offline: `plan` for MIG instances or memory shares, the bookkeeping
`simulate` replays them with, and how fragmented the free slices and shareable memory are.

Offline, every GPU not in MIG mode is shared, less `DEFAULT_SHARE_RESERVE_BYTES` (the
daemon's default reserve). Fragmentation of slices and shares is the part of what is free
that is stranded on GPUs already partly leased:

    fragmentation = free on partly leased GPUs / free on all GPUs

for shares the free is the room left to share, for slices the memory of the free MIG
instances. An idle node scores 0; packing (shares best-fit, slices one GPU first) keeps it
low, and spreading drives it toward 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuallocd.model import Topology
from gpuallocd.policies.base import AllocationRequest, Choice, NodeSnapshot
from gpuallocd.policies.rules import check_unit_choice, request_for
from gpuallocd.policies.shares import DEFAULT_SHARE_RESERVE_BYTES, choose_shares, share_eligible
from gpuallocd.policies.slices import choose_slices, free_instances

__all__ = [
    "UnitBook",
    "offline_capacity",
    "parse_unit_list",
    "share_fragmentation",
    "slice_fragmentation",
    "stranded_fraction",
    "unit_request",
]


def parse_unit_list(topology: Topology, text: str | None) -> tuple[str, ...]:
    """GPUs (indices or UUIDs) and MIG instances (`MIG-` UUIDs), comma-separated."""
    instances = topology.instances()
    parts = [p.strip() for p in (text or "").split(",") if p.strip()]
    return tuple(p if p in instances else topology.resolve(p) for p in parts)


def offline_capacity(topology: Topology) -> dict[str, int]:
    """Every GPU not in MIG mode, shared less the default reserve."""
    return {
        g.uuid: max(g.memory_total_bytes - DEFAULT_SHARE_RESERVE_BYTES, 0)
        for g in topology.gpus
        if not g.mig_mode and g.memory_total_bytes is not None
    }


def stranded_fraction(free_by_gpu: Mapping[str, int], partly_leased: Iterable[str]) -> float:
    """The part of the free on GPUs in `partly_leased` (0 where nothing is free)."""
    total = sum(free_by_gpu.values())
    stranded = sum(free_by_gpu.get(u, 0) for u in set(partly_leased))
    return 0.0 if total <= 0 else stranded / total


def share_fragmentation(snapshot: NodeSnapshot) -> float:
    """The part of the room left to share that sits on GPUs already holding shares."""
    rooms = {
        u: snapshot.share_room(u) for u in snapshot.share_capacity if share_eligible(snapshot, u)
    }
    return stranded_fraction(rooms, (u for u, used in snapshot.share_used.items() if used))


def slice_fragmentation(snapshot: NodeSnapshot) -> float:
    """The part of the free MIG instances' memory on GPUs with an instance leased."""
    free: dict[str, int] = {}
    for gpu, mig in free_instances(snapshot).values():
        free[gpu.uuid] = free.get(gpu.uuid, 0) + (mig.memory_total_bytes or 0)
    instances = snapshot.topology.instances()
    partly = {instances[u][0].uuid for u in snapshot.busy_units if u in instances}
    return stranded_fraction(free, partly)


@dataclass
class UnitBook:
    """Who holds which instances and shares during an offline replay or plan."""

    topology: Topology
    capacity: dict[str, int] = field(default_factory=dict)
    instances: dict[str, tuple[str, ...]] = field(default_factory=dict)  # lease -> MIG UUIDs
    shares: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.capacity:
            self.capacity = offline_capacity(self.topology)

    def used(self) -> dict[str, int]:
        used: dict[str, int] = {}
        for held in self.shares.values():
            for uuid, size in held:
                used[uuid] = used.get(uuid, 0) + size
        return used

    def busy_gpus(self) -> frozenset[str]:
        """GPUs that hold shares: not free for a whole-GPU lease."""
        return frozenset(self.used())

    def snapshot(self, base: NodeSnapshot, busy_units: Iterable[str] = ()) -> NodeSnapshot:
        held = {u for units in self.instances.values() for u in units}
        return NodeSnapshot(
            topology=self.topology,
            views=base.views,
            busy_units=frozenset(held) | frozenset(busy_units),
            share_capacity=self.capacity,
            share_used=self.used(),
        )

    def place(self, snapshot: NodeSnapshot, request: AllocationRequest) -> Choice:
        chooser = choose_slices if request.kind == "mig" else choose_shares
        choice = chooser(snapshot, request)
        check_unit_choice(choice, request, snapshot)
        return choice

    def take(self, lease: str, request: AllocationRequest, units: tuple[str, ...]) -> None:
        if request.kind == "mig":
            self.instances[lease] = units
        else:
            self.shares[lease] = tuple((u, request.memory_bytes or 0) for u in units)

    def holds(self, lease: str) -> bool:
        return lease in self.instances or lease in self.shares

    def give_back(self, lease: str) -> tuple[str, ...]:
        """Forget a lease's units; the units it held (none where it held none)."""
        if lease in self.instances:
            return self.instances.pop(lease)
        return tuple(uuid for uuid, _ in self.shares.pop(lease, ()))

    def parent_indices(self, units: Iterable[str]) -> tuple[int, ...]:
        instances, by_uuid = self.topology.instances(), self.topology.by_uuid()
        return tuple(instances[u][0].index if u in instances else by_uuid[u].index for u in units)


def unit_request(
    topology: Topology,
    count: int,
    required: tuple[str, ...],
    memory_bytes: int | None,
    mig_profile: str | None,
) -> AllocationRequest:
    return request_for(
        topology, count, required, memory_bytes=memory_bytes, mig_profile=mig_profile
    )
