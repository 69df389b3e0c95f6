"""What a policy is: a pure function of a frozen snapshot of the node and a request.

A policy does no I/O, reads no clock and keeps no global state. It gets a `NodeSnapshot`
(the topology, which GPUs are free and healthy, live use where known) and an
`AllocationRequest` (a count, GPUs that must be included, optional needs) and returns a
`Choice`, or raises `GpusUnavailable` / `PolicyNotApplicable`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from gpuallocd.model import HEALTHY, Gpu, LiveState, Topology

__all__ = ["AllocationRequest", "Choice", "GpuView", "NodeSnapshot", "Policy"]


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU as a policy sees it."""

    gpu: Gpu
    free: bool
    live: LiveState = HEALTHY
    foreign_use: bool = False

    @property
    def uuid(self) -> str:
        return self.gpu.uuid

    @property
    def available(self) -> bool:
        """Free, healthy and not used by someone without a lease."""
        return self.free and self.live.healthy and not self.foreign_use

    @property
    def memory_free_bytes(self) -> int | None:
        total, used = self.gpu.memory_total_bytes, self.live.memory_used_bytes
        if total is None:
            return None
        return max(total - (used or 0), 0)


@dataclass(frozen=True)
class NodeSnapshot:
    """The node at one instant: its topology and the view of every GPU, by UUID.

    For slices and shares: `busy_units` are the MIG instances leased (or reserved);
    `share_capacity` is the memory the shares of each shared GPU may sum to, and
    `share_used` what its active shares already hold. A GPU with shares, or in MIG mode,
    is not free for a whole-GPU lease.
    """

    topology: Topology
    views: Mapping[str, GpuView] = field(default_factory=dict)
    busy_units: frozenset[str] = frozenset()
    share_capacity: Mapping[str, int] = field(default_factory=dict)
    share_used: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        views = dict(self.views)
        for gpu in self.topology.gpus:
            if gpu.uuid not in views:
                views[gpu.uuid] = GpuView(gpu=gpu, free=not gpu.mig_mode)
        object.__setattr__(self, "views", MappingProxyType(views))
        object.__setattr__(self, "share_capacity", MappingProxyType(dict(self.share_capacity)))
        object.__setattr__(self, "share_used", MappingProxyType(dict(self.share_used)))

    def share_room(self, uuid: str) -> int:
        """The memory a new share may still take on a shared GPU (0 where not shared)."""
        return max(self.share_capacity.get(uuid, 0) - self.share_used.get(uuid, 0), 0)

    @classmethod
    def from_busy(
        cls,
        topology: Topology,
        busy: frozenset[str] = frozenset(),
        live: Mapping[str, LiveState] | None = None,
        foreign: frozenset[str] = frozenset(),
    ) -> NodeSnapshot:
        """A snapshot where the GPUs in `busy` are leased and every other one is free."""
        live = live or {}
        views = {
            g.uuid: GpuView(
                gpu=g,
                free=g.uuid not in busy and not g.mig_mode,
                live=live.get(g.uuid, HEALTHY),
                foreign_use=g.uuid in foreign,
            )
            for g in topology.gpus
        }
        return cls(topology=topology, views=views)

    def available(self) -> tuple[GpuView, ...]:
        """The GPUs a policy may choose, in index order."""
        return tuple(self.views[g.uuid] for g in self.topology.gpus if self.views[g.uuid].available)


@dataclass(frozen=True, slots=True)
class AllocationRequest:
    """`count` GPUs in all, `required` (UUIDs) among them, each with the memory asked for.

    A memory share (`memory_bytes`): that much memory on each of `count` GPUs. A slice
    request (`mig_profile`, or `required` naming `MIG-` UUIDs): `count` MIG instances.
    """

    count: int
    required: tuple[str, ...] = ()
    min_free_memory_bytes: int | None = None
    memory_bytes: int | None = None
    mig_profile: str | None = None
    slices: bool = False

    @property
    def kind(self) -> str:
        """`share`, `mig` or `whole`."""
        if self.memory_bytes is not None:
            return "share"
        return "mig" if self.slices or self.mig_profile is not None else "whole"


@dataclass(frozen=True, slots=True)
class Choice:
    """The GPUs a policy picked (UUIDs), its score for the set, and why.

    `exact` is False only when a search stopped at its work cap before proving its set
    best; `search_nodes` counts the search's work where a policy searches.
    """

    gpus: tuple[str, ...]
    score: float | None = None
    reason: str = ""
    exact: bool = True
    search_nodes: int | None = None


@runtime_checkable
class Policy(Protocol):
    """Picks GPUs for a request. Pure: same snapshot and request, same choice."""

    name: str

    def choose(self, snapshot: NodeSnapshot, request: AllocationRequest) -> Choice: ...
