"""Power of one NVIDIA GPU: its energy counter, draw and limits, and setting its limit.

Five NVML queries per GPU (read only where asked: at a lease's grant and end, and on the
energy timer, never on the sampling interval). A figure NVML cannot give (a GPU older than
Volta has no energy counter) is None; a GPU in trouble raises NvmlError.
"""

from __future__ import annotations

from gpuallocd.inventory.nvml.api import NvmlApi, optional
from gpuallocd.model.power import PowerReading

__all__ = ["read_power"]


def read_power(api: NvmlApi, handle: object) -> PowerReading:
    """What the GPU tells of its power now."""
    limits = optional(api.power_limit_constraints_mw, handle)
    return PowerReading(
        energy_mj=optional(api.energy_mj, handle),
        draw_mw=optional(api.power_draw_mw, handle),
        limit_mw=optional(api.power_limit_mw, handle),
        default_limit_mw=optional(api.power_default_limit_mw, handle),
        min_limit_mw=None if limits is None else limits[0],
        max_limit_mw=None if limits is None else limits[1],
    )
