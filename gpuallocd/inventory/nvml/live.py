"""Live state of one GPU: memory in use, utilisation, compute processes and their owners,
and its energy counter.

Four NVML queries per GPU plus one stat of /proc per process: cheap enough for a sampling
interval of a second or two (docs/hardware.md gives the measured cost over the fake). A GPU
that cannot be read comes back unhealthy with the reason; sampling never raises for it. One
that has fallen off the bus is also `lost`; it comes back to service at the first sample that
reads it again (its leases are left as they are meanwhile).
"""

from __future__ import annotations

from gpuallocd.errors import NvmlError
from gpuallocd.host.proc import process_owner
from gpuallocd.inventory.nvml.api import NvmlApi, optional
from gpuallocd.inventory.nvml.gate import NvmlCode, nvml_code
from gpuallocd.model import GpuProcess, LiveState

__all__ = ["sample_gpu", "unreadable"]


def unreadable(reason: str, *, lost: bool = False) -> LiveState:
    return LiveState(healthy=False, health_reason=f"GPU cannot be read: {reason}", lost=lost)


def _processes(api: NvmlApi, handle: object) -> tuple[GpuProcess, ...]:
    found = optional(api.placed_processes, handle) or ()
    return tuple(
        GpuProcess(
            pid=pid,
            used_memory_bytes=used,
            uid=process_owner(pid),
            gpu_instance_id=gi,
            compute_instance_id=ci,
        )
        for pid, used, gi, ci in found
    )


def sample_gpu(api: NvmlApi, handle: object) -> LiveState:
    """What the GPU is doing now, or why it cannot be read."""
    try:
        memory = api.memory(handle)
        utilization = optional(api.utilization_percent, handle)
        processes = _processes(api, handle)
        energy = optional(api.energy_mj, handle)  # None before Volta
    except NvmlError as exc:
        return unreadable(exc.message, lost=nvml_code(exc) == NvmlCode.GPU_IS_LOST)
    return LiveState(
        memory_used_bytes=memory.used_bytes,
        utilization_percent=None if utilization is None else float(utilization),
        processes=processes,
        energy_mj=energy,
    )
