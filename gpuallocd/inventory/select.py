"""Choosing the inventory backend from the `--inventory` option."""

from __future__ import annotations

from gpuallocd.errors import NvmlError
from gpuallocd.inventory.base import Inventory
from gpuallocd.inventory.file import FileInventory

__all__ = ["NVML_HINT", "open_inventory"]

NVML_HINT = (
    "to run without a GPU, start on a topology file instead, "
    "e.g. `gpuallocd --inventory example:workstation-4gpu-nvbridge`"
)


def _open_nvml() -> Inventory:
    try:
        from gpuallocd.inventory.nvml import NvmlInventory
    except ImportError as exc:  # the NVML backend module is optional at this layer
        raise NvmlError(f"NVML is not available ({exc}); {NVML_HINT}") from None
    return NvmlInventory()


def open_inventory(spec: str) -> Inventory:
    """`nvml` for the real GPUs, else a topology file path or `example:NAME`."""
    if spec == "nvml":
        return _open_nvml()
    return FileInventory(spec)
