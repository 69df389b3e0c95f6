"""Placing memory shares: best fit, so that whole GPUs stay whole.

Pure: a snapshot and a request in, a `Choice` of GPU UUIDs out, one share of
`request.memory_bytes` on each. A GPU may take a share when it is shared (it has a
`share_capacity`), healthy, used by nobody without a lease, not leased whole, not reserved
for a waiter, and its room (capacity less the shares it holds) covers the share. Among
those, the one with the least room left after the share goes first (GPU-utils' best fit):
GPUs already holding shares fill up before an untouched GPU is broken into; among untouched
GPUs, the one least linked to the other free GPUs goes first (it matters least to whole-GPU
requests), then the lowest index.
"""

from __future__ import annotations

from gpuallocd.errors import CountExceedsNode, GpuBusy, GpusUnavailable, InvalidRequest
from gpuallocd.policies.base import AllocationRequest, Choice, NodeSnapshot
from gpuallocd.policies.scoring import pair_score

__all__ = ["DEFAULT_SHARE_RESERVE_BYTES", "choose_shares", "format_gib", "share_eligible"]

DEFAULT_SHARE_RESERVE_BYTES = 2**30
"""Memory of a shared GPU no share may take (the daemon's default; `plan` and `simulate`)."""


def format_gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"


def share_eligible(snapshot: NodeSnapshot, uuid: str) -> bool:
    """The GPU may take a share now (room aside)."""
    view = snapshot.views[uuid]
    holds_shares = snapshot.share_used.get(uuid, 0) > 0
    return (
        uuid in snapshot.share_capacity
        and uuid not in snapshot.busy_units
        and view.live.healthy
        and not view.foreign_use
        and (view.free or holds_shares)
    )


def _check_shareable(snapshot: NodeSnapshot, request: AllocationRequest, need: int) -> None:
    capacity = snapshot.share_capacity
    if not capacity:
        raise InvalidRequest(
            "no GPU of this node is shared: memory shares need `shared_gpus` in the "
            "daemon's settings",
            field="memory_bytes",
        )
    if need > max(capacity.values()):
        raise InvalidRequest(
            f"a share of {format_gib(need)} is more than a shared GPU holds "
            f"({format_gib(max(capacity.values()))} after the reserve)",
            field="memory_bytes",
        )
    if request.count > len(capacity):
        raise CountExceedsNode(
            f"shares on {request.count} GPUs asked for; {len(capacity)} GPU(s) are shared",
            count=request.count,
            node_gpus=len(capacity),
        )
    for uuid in request.required:
        if uuid not in capacity:
            index = snapshot.views[uuid].gpu.index
            raise InvalidRequest(f"GPU {index} is not shared", field="gpus")
        if not share_eligible(snapshot, uuid) or snapshot.share_room(uuid) < need:
            index = snapshot.views[uuid].gpu.index
            raise GpuBusy(
                f"GPU {index} cannot take a share of {format_gib(need)} now "
                f"({format_gib(snapshot.share_room(uuid))} left to share)",
                gpus=[uuid],
            )


def _links_to_free(snapshot: NodeSnapshot, uuid: str) -> int:
    topology, gpu = snapshot.topology, snapshot.views[uuid].gpu
    return sum(
        pair_score(topology.link(uuid, other.uuid), gpu, other.gpu)
        for other in snapshot.available()
        if other.uuid != uuid
    )


def choose_shares(snapshot: NodeSnapshot, request: AllocationRequest) -> Choice:
    """A share of `memory_bytes` on each of `count` distinct GPUs, packed best-fit."""
    need = request.memory_bytes or 0
    _check_shareable(snapshot, request, need)
    required = set(request.required)
    fitting = [
        g.uuid
        for g in snapshot.topology.gpus
        if g.uuid not in required
        and share_eligible(snapshot, g.uuid)
        and snapshot.share_room(g.uuid) >= need
    ]
    missing = request.count - len(required)
    if missing > len(fitting):
        raise GpusUnavailable(
            f"{request.count} share(s) of {format_gib(need)} asked for; "
            f"{len(fitting) + len(required)} GPU(s) have that much left to share",
            count=request.count,
            available=len(fitting) + len(required),
        )
    fitting.sort(
        key=lambda u: (
            snapshot.share_room(u) - need,
            _links_to_free(snapshot, u),
            snapshot.views[u].gpu.index,
        )
    )
    picked = (*request.required, *fitting[:missing])
    return Choice(gpus=picked, reason=f"best fit: {format_gib(need)} on {len(picked)} GPU(s)")
