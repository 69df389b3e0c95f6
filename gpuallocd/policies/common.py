"""Checks every policy makes before it picks: required GPUs usable, enough candidates."""

from __future__ import annotations

from gpuallocd.errors import CountExceedsNode, GpuBusy, GpusUnavailable, InvalidRequest, UnknownGpu
from gpuallocd.policies.base import AllocationRequest, GpuView, NodeSnapshot

__all__ = ["candidates", "check_request", "check_required", "fits_memory"]


def check_request(snapshot: NodeSnapshot, request: AllocationRequest) -> None:
    """The request makes sense for this node: a count >= 1 that covers distinct known GPUs."""
    if request.count < 1:
        raise InvalidRequest(f"count must be at least 1, not {request.count}")
    if len(set(request.required)) != len(request.required):
        raise InvalidRequest("a required GPU is named twice")
    for uuid in request.required:
        if uuid not in snapshot.views:
            raise UnknownGpu(f"no GPU {uuid} on this node", gpu=uuid)
    if request.count < len(request.required):
        raise InvalidRequest(
            f"count {request.count} is less than the {len(request.required)} required GPU(s)"
        )
    size = len(snapshot.topology.gpus)
    if request.count > size:
        raise CountExceedsNode(
            f"{request.count} GPU(s) asked for, the node has {size}",
            requested=request.count,
            gpus=size,
        )


def fits_memory(view: GpuView, request: AllocationRequest) -> bool:
    """The GPU has at least the request's free memory (an exact fit fits)."""
    need = request.min_free_memory_bytes
    if need is None:
        return True
    free = view.memory_free_bytes
    return free is not None and free >= need


def check_required(snapshot: NodeSnapshot, request: AllocationRequest) -> tuple[GpuView, ...]:
    """The required GPUs, each checked to be available and to fit the memory need."""
    views = []
    for uuid in request.required:
        view = snapshot.views[uuid]
        if not view.available:
            why = (
                "unhealthy" if not view.live.healthy else "in use" if view.foreign_use else "leased"
            )
            raise GpuBusy(f"GPU {view.gpu.index} ({uuid}) is {why}", gpu=uuid)
        if not fits_memory(view, request):
            raise GpuBusy(f"GPU {view.gpu.index} ({uuid}) has too little free memory", gpu=uuid)
        views.append(view)
    return tuple(views)


def candidates(snapshot: NodeSnapshot, request: AllocationRequest) -> tuple[GpuView, ...]:
    """Available GPUs, not required, that fit the request's memory need, in index order.

    Raises GpusUnavailable when there are too few of them for the request.
    """
    check_request(snapshot, request)
    check_required(snapshot, request)
    required = set(request.required)
    pool = tuple(
        v for v in snapshot.available() if v.uuid not in required and fits_memory(v, request)
    )
    missing = request.count - len(required)
    if missing > len(pool):
        raise GpusUnavailable(
            f"{request.count} GPU(s) asked for, {len(pool) + len(required)} available",
            requested=request.count,
            available=len(pool) + len(required),
        )
    return pool
