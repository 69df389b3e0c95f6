"""What every policy does before it picks: check the request, the required GPUs and the pool."""

from __future__ import annotations

from gpuallocd.errors import GpuBusy, GpusUnavailable
from gpuallocd.policies.base import AllocationRequest, GpuView, NodeSnapshot
from gpuallocd.policies.rules import check_request

__all__ = ["candidates", "check_required", "fits_memory"]


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
            raise GpuBusy(f"GPU {view.gpu.index} ({uuid}) is {why}", gpus=[uuid])
        if not fits_memory(view, request):
            raise GpuBusy(f"GPU {view.gpu.index} ({uuid}) has too little free memory", gpus=[uuid])
        views.append(view)
    return tuple(views)


def candidates(snapshot: NodeSnapshot, request: AllocationRequest) -> tuple[GpuView, ...]:
    """Available GPUs, not required, that fit the request's memory need, in index order.

    Raises GpusUnavailable when there are too few of them for the request.
    """
    check_request(snapshot.topology, request)
    check_required(snapshot, request)
    required = set(request.required)
    pool = tuple(
        v for v in snapshot.available() if v.uuid not in required and fits_memory(v, request)
    )
    missing = request.count - len(required)
    if missing > len(pool):
        raise GpusUnavailable(
            f"{request.count} GPU(s) asked for, {len(pool) + len(required)} available",
            count=request.count,
            available=len(pool) + len(required),
        )
    return pool
