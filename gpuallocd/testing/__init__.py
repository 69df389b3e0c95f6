"""Hardware fakes for tests, loaded from recorded machines; usable by third parties.

    from gpuallocd.inventory.nvml.backend import NvmlInventory
    from gpuallocd.testing import FakeNvml

    fake = FakeNvml.from_recording("dgx-a100-mig")
    inventory = NvmlInventory(nvml=fake)
    fake.inject_xid(fake.uuids()[3], 79)

Bundled recordings: `recording_names()` (NVML) and `recording_names(AMD_FORMAT)`.
They were built from published specifications, not captured on hardware; capture a
real node with `python -m gpuallocd.testing.capture > machine.json` (docs/hardware.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuallocd.testing.fake_amdsmi import FakeAmdSmi
from gpuallocd.testing.fake_nvml import FakeHandle, FakeNvml
from gpuallocd.testing.recording import AMD_FORMAT, NVML_FORMAT, load_recording, recording_names

if TYPE_CHECKING:
    from gpuallocd.inventory.nvml.backend import NvmlInventory

__all__ = [
    "AMD_FORMAT",
    "NVML_FORMAT",
    "FakeAmdSmi",
    "FakeHandle",
    "FakeNvml",
    "load_recording",
    "nvml_inventory",
    "recording_names",
]


def nvml_inventory(recording: str, **options: Any) -> tuple[NvmlInventory, FakeNvml]:
    """The real NVML inventory over a fake of a recording, and the fake to drive it.

    Close the inventory when done: it runs an Xid watcher thread.
    """
    from gpuallocd.inventory.nvml.backend import NvmlInventory

    fake = FakeNvml.from_recording(recording)
    return NvmlInventory(nvml=fake, name=fake.name, **options), fake
