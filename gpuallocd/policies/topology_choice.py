"""Glue between a snapshot and the exact topology pick, shared by the topology-aware policies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuallocd.policies.base import AllocationRequest, GpuView, NodeSnapshot
from gpuallocd.policies.scoring import SetScore, set_breakdown
from gpuallocd.policies.search.picker import Pick, Picker, PickRequest

__all__ = ["TopologyChoice", "describe_score", "pick_by_topology", "search_note"]


@dataclass(frozen=True, slots=True)
class TopologyChoice:
    """GPUs (UUIDs, in index order), their score, and how the search went."""

    gpus: tuple[str, ...]
    score: SetScore
    pick: Pick


def pick_by_topology(
    picker: Picker,
    snapshot: NodeSnapshot,
    request: AllocationRequest,
    selectable: Sequence[GpuView],
    forced: Sequence[str] = (),
) -> TopologyChoice:
    """The best set holding the required and `forced` GPUs, the rest from `selectable`."""
    topology = snapshot.topology
    position = picker.matrix(topology).position
    required = (*request.required, *forced)
    taken = {*required, *(v.uuid for v in selectable)}
    ask = PickRequest(
        required=tuple(position[u] for u in required),
        selectable=tuple(position[v.uuid] for v in selectable),
        others=tuple(position[v.uuid] for v in snapshot.available() if v.uuid not in taken),
        count=request.count - len(required),
    )
    found = picker.pick(topology, ask)
    gpus = tuple(topology.gpus[p].uuid for p in sorted(found.positions))
    return TopologyChoice(gpus=gpus, score=set_breakdown(topology, gpus), pick=found)


def describe_score(score: SetScore) -> str:
    return (
        f"{score.lanes} NVLink/XGMI lanes, {score.pcie_points} PCIe points, "
        f"{score.numa_pairs} same-NUMA pairs"
    )


def search_note(pick: Pick, max_nodes: int | None) -> str:
    if pick.exact:
        return f"proven best ({pick.nodes} search nodes)"
    return f"search stopped at its cap of {max_nodes} nodes: the best set found, not proven best"
