"""Choosing the inventory backend from the `--inventory` option.

nvml                        the NVIDIA GPUs of this node, through NVML
amdsmi                      the AMD GPUs of this node, through amdsmi (extra `amd`)
nvml-recording:NAME|PATH    NVML replayed from a recorded machine (gpuallocd.testing)
amd-recording:NAME|PATH     amdsmi replayed from a recorded machine
example:NAME | PATH         a topology file (`nvidia-smi topo -m` text or our JSON)
"""

from __future__ import annotations

from gpuallocd.errors import InventoryError, NvmlError
from gpuallocd.inventory.base import Inventory
from gpuallocd.inventory.file import FileInventory

__all__ = ["AMD_RECORDING_PREFIX", "NVML_HINT", "NVML_RECORDING_PREFIX", "open_inventory"]

NVML_HINT = (
    "to run without a GPU, start on a topology file instead, "
    "e.g. `gpuallocd --inventory example:workstation-4gpu-nvbridge`"
)
NVML_RECORDING_PREFIX = "nvml-recording:"
AMD_RECORDING_PREFIX = "amd-recording:"


def _open_nvml() -> Inventory:
    try:
        from gpuallocd.inventory.nvml import NvmlInventory
    except ImportError as exc:  # the NVML backend module is optional at this layer
        raise NvmlError(f"NVML is not available ({exc}); {NVML_HINT}") from None
    return NvmlInventory()


def _open_nvml_recording(spec: str) -> Inventory:
    from gpuallocd.inventory.nvml import NvmlInventory
    from gpuallocd.testing import FakeNvml

    fake = FakeNvml.from_recording(spec)
    return NvmlInventory(nvml=fake, name=fake.name)


def _open_amd(spec: str | None) -> Inventory:
    from gpuallocd.inventory.amd import AmdInventory

    if spec is None:
        return AmdInventory()
    from gpuallocd.testing import FakeAmdSmi

    fake = FakeAmdSmi.from_recording(spec)
    return AmdInventory(amdsmi=fake, name=fake.name)


def _after(prefix: str, spec: str) -> str:
    rest = spec[len(prefix) :]
    if not rest:
        raise InventoryError(f"`--inventory {spec}` needs a recording name or path after the colon")
    return rest


def open_inventory(spec: str) -> Inventory:
    """The inventory for an `--inventory` value (see the module docstring)."""
    if spec == "nvml":
        return _open_nvml()
    if spec == "amdsmi":
        return _open_amd(None)
    if spec.startswith(NVML_RECORDING_PREFIX):
        return _open_nvml_recording(_after(NVML_RECORDING_PREFIX, spec))
    if spec.startswith(AMD_RECORDING_PREFIX):
        return _open_amd(_after(AMD_RECORDING_PREFIX, spec))
    return FileInventory(spec)
