"""Placing MIG instances: slices of one GPU first, then slices of the best-linked GPUs.

Pure, like every policy: a snapshot and a request in, a `Choice` of `MIG-` UUIDs out. Among
the free instances of the profile asked for, a request that fits on one GPU takes the GPU
with the fewest such instances free (best fit: GPUs with more free instances stay whole for
larger requests; ties by index). A request that fits on no single GPU starts on the GPU with
the most free instances and adds the GPU best linked to those chosen (the pair scores of
`scoring`), until it has enough.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuallocd.errors import GpuBusy, GpusUnavailable
from gpuallocd.model import Gpu, MigDevice
from gpuallocd.policies.base import AllocationRequest, Choice, NodeSnapshot
from gpuallocd.policies.scoring import pair_score, set_score

__all__ = ["choose_slices", "free_instances"]


def free_instances(
    snapshot: NodeSnapshot, profile: str | None = None
) -> dict[str, tuple[Gpu, MigDevice]]:
    """Instances not leased or reserved, on healthy GPUs, of `profile` where given."""
    return {
        uuid: (gpu, mig)
        for uuid, (gpu, mig) in snapshot.topology.instances().items()
        if uuid not in snapshot.busy_units
        and snapshot.views[gpu.uuid].live.healthy
        and profile in (None, mig.profile)
    }


def _check_required(
    snapshot: NodeSnapshot, request: AllocationRequest, free: Mapping[str, object]
) -> None:
    instances = snapshot.topology.instances()
    for uuid in request.required:
        if uuid not in free:
            gpu = instances[uuid][0]
            why = "leased" if uuid in snapshot.busy_units else "on an unhealthy GPU"
            raise GpuBusy(f"MIG instance {uuid} of GPU {gpu.index} is {why}", gpus=[uuid])


def _by_parent(free: Mapping[str, tuple[Gpu, MigDevice]], taken: set[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for uuid, (gpu, _) in free.items():
        if uuid not in taken:
            groups.setdefault(gpu.uuid, []).append(uuid)
    return groups


def _one_gpu(groups: Mapping[str, list[str]], need: int, order: Mapping[str, int]) -> list[str]:
    """The best-fitting single GPU's instances, or [] where none has enough."""
    fitting = [p for p, units in groups.items() if len(units) >= need]
    if not fitting:
        return []
    best = min(fitting, key=lambda p: (len(groups[p]), order[p]))
    return groups[best][:need]


def _linked_gpus(
    snapshot: NodeSnapshot, groups: Mapping[str, list[str]], need: int, start: Sequence[str]
) -> list[str]:
    """Instances from GPUs added one at a time, each the best linked to those chosen."""
    topology, by_uuid = snapshot.topology, snapshot.topology.by_uuid()
    order = {g.uuid: g.index for g in topology.gpus}
    chosen = list(start)
    left = dict(groups)
    picked: list[str] = []
    while len(picked) < need:

        def closeness(parent: str) -> tuple[int, int, int]:
            links = sum(
                pair_score(topology.link(parent, c), by_uuid[parent], by_uuid[c]) for c in chosen
            )
            return (-links, -len(left[parent]), order[parent])

        parent = min(left, key=closeness)
        picked += left.pop(parent)[: need - len(picked)]
        chosen.append(parent)
    return picked


def choose_slices(snapshot: NodeSnapshot, request: AllocationRequest) -> Choice:
    """`request.count` free instances of the profile, the required ones among them."""
    free = free_instances(snapshot, request.mig_profile)
    _check_required(snapshot, request, free)
    need = request.count - len(request.required)
    groups = _by_parent(free, set(request.required))
    available = sum(len(units) for units in groups.values())
    if need > available:
        kind = request.mig_profile or "MIG"
        raise GpusUnavailable(
            f"{request.count} {kind} instance(s) asked for, "
            f"{available + len(request.required)} free",
            count=request.count,
            available=available + len(request.required),
        )
    parents_of_required = list(dict.fromkeys(free[u][0].uuid for u in request.required))
    order = {g.uuid: g.index for g in snapshot.topology.gpus}
    picked: list[str] = []
    if need and not parents_of_required:
        picked = _one_gpu(groups, need, order)
    if need and not picked:
        start = parents_of_required or [max(groups, key=lambda p: (len(groups[p]), -order[p]))]
        picked = _linked_gpus(snapshot, groups, need, start)
    units = (*request.required, *picked)
    parents = list(dict.fromkeys(free[u][0].uuid for u in units))
    return Choice(
        gpus=units,
        score=set_score(snapshot.topology, parents),
        reason=f"{len(units)} instance(s) on {len(parents)} GPU(s)",
    )
