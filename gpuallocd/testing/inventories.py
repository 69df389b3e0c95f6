"""Inventories that replay recorded machines, registered as `--inventory` kinds.

`pyproject.toml` registers them under the `gpuallocd.inventories` entry-point group:

    nvml-recording:NAME|PATH    the NVML backend over FakeNvml
    nvml-recording:NAME?live=FILE   ... reading what runs on the GPUs now from FILE (live.py)
    amd-recording:NAME|PATH     the amdsmi backend over FakeAmdSmi
"""

from __future__ import annotations

from gpuallocd.inventory.amd.backend import AmdInventory
from gpuallocd.inventory.base import Inventory
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.testing.fake_amdsmi import FakeAmdSmi
from gpuallocd.testing.fake_nvml import FakeNvml
from gpuallocd.testing.live import split_live_option

__all__ = ["open_amd_recording", "open_nvml_recording"]


def open_nvml_recording(recording: str) -> Inventory:
    """The real NVML backend over a fake replaying `recording` (a bundled name or a path),
    optionally followed by `?live=FILE`."""
    name, live = split_live_option(recording)
    fake = FakeNvml.from_recording(name)
    if live is not None:
        fake.follow_live_file(live)
    return NvmlInventory(nvml=fake, name=fake.name)


def open_amd_recording(recording: str) -> Inventory:
    """The real amdsmi backend over a fake replaying `recording`."""
    fake = FakeAmdSmi.from_recording(recording)
    return AmdInventory(amdsmi=fake, name=fake.name)
