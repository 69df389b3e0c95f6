"""Choosing the inventory backend from the `--inventory` option.

nvml                        the NVIDIA GPUs of this node, through NVML
amdsmi                      the AMD GPUs of this node, through amdsmi (extra `amd`)
KIND:ARGUMENT               a backend registered under the `gpuallocd.inventories`
                            entry-point group as KIND; gpuallocd.testing registers
                            `nvml-recording:NAME|PATH` and `amd-recording:NAME|PATH`
example:NAME | PATH         a topology file (`nvidia-smi topo -m` text or our JSON)

Registered backends are found by name, the way policies are: this module imports none of
them, so the daemon never depends on the test fakes, and a third party can add its own.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

from gpuallocd.errors import InventoryError, NvmlError
from gpuallocd.inventory.base import NO_GPU_HINT, Inventory
from gpuallocd.inventory.file import FileInventory

__all__ = ["ENTRY_POINT_GROUP", "open_inventory", "registered_kinds"]

ENTRY_POINT_GROUP = "gpuallocd.inventories"
Opener = Callable[[str], Inventory]


def _open_nvml() -> Inventory:
    try:
        from gpuallocd.inventory.nvml.backend import NvmlInventory
    except ImportError as exc:  # the NVML backend module is optional at this layer
        raise NvmlError(f"NVML is not available ({exc}); {NO_GPU_HINT}") from exc
    return NvmlInventory()


def _open_amd() -> Inventory:
    from gpuallocd.inventory.amd.backend import AmdInventory

    return AmdInventory()


def registered_kinds() -> dict[str, Opener]:
    """Backends registered by installed packages, by the kind before the colon."""
    return {ep.name: ep.load() for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _registered(kind: str) -> Opener | None:
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=kind):
        opener: Opener = ep.load()
        return opener
    return None


def open_inventory(spec: str) -> Inventory:
    """The inventory for an `--inventory` value (see the module docstring)."""
    if spec == "nvml":
        return _open_nvml()
    if spec == "amdsmi":
        return _open_amd()
    kind, colon, argument = spec.partition(":")
    if kind == "example":  # a bundled topology: no need to read every package's entry points
        return FileInventory(spec)
    opener = _registered(kind) if colon else None
    if opener is None:
        return FileInventory(spec)
    if not argument:
        raise InventoryError(f"`--inventory {spec}` needs a name or path after the colon")
    return opener(argument)
