"""`plan`: which GPUs a policy would pick on a topology, and why."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpuallocd.model import Link, Topology
from gpuallocd.planning.slice_plans import (
    UnitBook,
    share_fragmentation,
    slice_fragmentation,
    unit_request,
)
from gpuallocd.policies.base import NodeSnapshot, Policy
from gpuallocd.policies.rules import check_choice, request_for
from gpuallocd.policies.scoring import pair_breakdown, set_breakdown

__all__ = ["Plan", "PlannedPair", "link_label", "make_plan", "make_unit_plan", "parse_gpu_list"]


def parse_gpu_list(topology: Topology, text: str | None) -> tuple[str, ...]:
    """GPUs from a comma-separated list of indices or UUIDs ('' or None: none)."""
    if not text:
        return ()
    return topology.resolve_all(part for part in text.split(",") if part.strip())


def link_label(link: Link) -> str:
    """How nvidia-smi would print the link: NV#, XGMI#, else the PCIe level ('-' unknown)."""
    if link.nvlinks:
        return f"NV{link.nvlinks}"
    if link.xgmi:
        return f"XGMI{link.xgmi}"
    return link.pcie.name if link.pcie is not None else "-"


@dataclass(frozen=True, slots=True)
class PlannedPair:
    gpus: tuple[int, int]
    link: str
    pcie: str | None
    same_numa: bool
    score: int

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": list(self.gpus),
            "link": self.link,
            "pcie": self.pcie,
            "same_numa": self.same_numa,
            "score": self.score,
        }


@dataclass(frozen=True, slots=True)
class Plan:
    topology: str
    policy: str
    count: int
    busy: tuple[int, ...]
    gpus: tuple[int, ...]
    uuids: tuple[str, ...]
    score: int
    lanes: int
    pcie_points: int
    numa_pairs: int
    pairs: tuple[PlannedPair, ...]
    reason: str
    exact: bool
    kind: str = "whole"
    fragmentation: float | None = None  # slices and shares: of what is left free after

    def to_json(self) -> dict[str, Any]:
        return {
            "topology": self.topology,
            "policy": self.policy,
            "count": self.count,
            "busy": list(self.busy),
            "gpus": list(self.gpus),
            "uuids": list(self.uuids),
            "score": self.score,
            "tiers": {
                "lanes": self.lanes,
                "pcie_points": self.pcie_points,
                "numa_pairs": self.numa_pairs,
            },
            "pairs": [p.to_json() for p in self.pairs],
            "reason": self.reason,
            "exact": self.exact,
            "kind": self.kind,
            "fragmentation": self.fragmentation,
        }


def _pairs(topology: Topology, uuids: tuple[str, ...]) -> tuple[PlannedPair, ...]:
    by_uuid = topology.by_uuid()
    gpus = [by_uuid[u] for u in uuids]
    out = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            link = topology.link(a.uuid, b.uuid)
            tiers = pair_breakdown(link, a, b)
            out.append(
                PlannedPair(
                    gpus=(a.index, b.index),
                    link=link_label(link),
                    pcie=link.pcie.name if link.pcie is not None else None,
                    same_numa=tiers.same_numa,
                    score=tiers.value,
                )
            )
    return tuple(out)


def make_plan(
    topology: Topology,
    policy: Policy,
    count: int,
    busy: Iterable[str] = (),
    required: Iterable[str] = (),
) -> Plan:
    """Ask `policy` for `count` GPUs with `busy` leased, under the daemon's rules."""
    busy_set = frozenset(busy)
    snapshot = NodeSnapshot.from_busy(topology, busy=busy_set)
    request = request_for(topology, count, tuple(required))
    choice = policy.choose(snapshot, request)
    check_choice(policy.name, choice, request, snapshot)
    by_uuid = topology.by_uuid()
    uuids = tuple(sorted(choice.gpus, key=lambda u: by_uuid[u].index))
    tiers = set_breakdown(topology, uuids)
    return Plan(
        topology=topology.name,
        policy=policy.name,
        count=count,
        busy=tuple(sorted(by_uuid[u].index for u in busy_set)),
        gpus=tuple(by_uuid[u].index for u in uuids),
        uuids=uuids,
        score=tiers.value,
        lanes=tiers.lanes,
        pcie_points=tiers.pcie_points,
        numa_pairs=tiers.numa_pairs,
        pairs=_pairs(topology, uuids),
        reason=choice.reason,
        exact=choice.exact,
    )


def make_unit_plan(
    topology: Topology,
    count: int,
    *,
    memory_bytes: int | None = None,
    mig_profile: str | None = None,
    busy: Iterable[str] = (),
    required: Iterable[str] = (),
) -> Plan:
    """Where `count` MIG instances of a profile, or shares of `memory_bytes`, would go with
    `busy` GPUs leased whole and `busy` instances leased; every GPU not in MIG mode shared."""
    busy_set = frozenset(busy)
    book = UnitBook(topology)
    base = NodeSnapshot.from_busy(topology, busy=busy_set)
    snapshot = book.snapshot(base, busy_units=busy_set)
    request = unit_request(topology, count, tuple(required), memory_bytes, mig_profile)
    choice = book.place(snapshot, request)
    book.take("plan", request, choice.gpus)
    after = book.snapshot(base, busy_units=busy_set)
    parents = tuple(dict.fromkeys(_parent_uuids(topology, choice.gpus)))
    tiers = set_breakdown(topology, parents)
    fragmentation = (
        slice_fragmentation(after) if request.kind == "mig" else share_fragmentation(after)
    )
    return Plan(
        topology=topology.name,
        policy="best-effort" if request.kind == "mig" else "best-fit",
        count=count,
        busy=book.parent_indices(busy_set),
        gpus=book.parent_indices(choice.gpus),
        uuids=choice.gpus,
        score=tiers.value,
        lanes=tiers.lanes,
        pcie_points=tiers.pcie_points,
        numa_pairs=tiers.numa_pairs,
        pairs=_pairs(topology, parents),
        reason=choice.reason,
        exact=choice.exact,
        kind=request.kind,
        fragmentation=fragmentation,
    )


def _parent_uuids(topology: Topology, units: Iterable[str]) -> list[str]:
    instances = topology.instances()
    return [instances[u][0].uuid if u in instances else u for u in units]
