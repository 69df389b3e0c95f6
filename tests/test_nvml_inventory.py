"""The inventory specs for real and recorded hardware, and rescans with lost GPUs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuallocd.errors import InventoryError, NvmlError
from gpuallocd.inventory import FileInventory, open_inventory
from gpuallocd.inventory.amd.backend import AmdInventory
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.testing import FakeNvml, load_recording, nvml_inventory


@pytest.fixture
def dgx() -> Iterator[tuple[NvmlInventory, FakeNvml]]:
    inventory, fake = nvml_inventory("dgx-a100-mig", xid_wait_ms=20)
    yield inventory, fake
    inventory.close()


def test_nvml_recording_spec_by_name() -> None:
    """`nvml-recording:NAME` runs the NVML backend over a bundled recording."""
    inventory = open_inventory("nvml-recording:dgx1-volta")
    try:
        assert isinstance(inventory, NvmlInventory)
        assert inventory.topology().name == "dgx1-volta"
        assert len(inventory.sample()) == 8
    finally:
        inventory.close()


def test_nvml_recording_spec_by_path(tmp_path: Path) -> None:
    """`nvml-recording:PATH` replays a captured file; its name comes from the recording."""
    path = tmp_path / "captured.json"
    path.write_text(json.dumps({**load_recording("h200-single"), "name": "my-node"}))
    inventory = open_inventory(f"nvml-recording:{path}")
    try:
        assert inventory.topology().name == "my-node"
    finally:
        inventory.close()


def test_amd_recording_spec() -> None:
    """`amd-recording:NAME` runs the amdsmi backend over a bundled recording."""
    inventory = open_inventory("amd-recording:amd-mi300x-8gpu")
    try:
        assert isinstance(inventory, AmdInventory)
        assert len(inventory.topology().gpus) == 8
    finally:
        inventory.close()


@pytest.mark.parametrize("spec", ["nvml-recording:", "amd-recording:"])
def test_recording_spec_without_a_name_is_refused(spec: str) -> None:
    """An empty recording name says what is missing."""
    with pytest.raises(InventoryError, match="needs a name or path"):
        open_inventory(spec)


def test_other_specs_are_topology_files() -> None:
    """Anything else is still a topology file or a bundled example."""
    assert isinstance(open_inventory("example:dgx1-volta"), FileInventory)


def test_rescan_keeps_a_gpu_lost_since_start(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """A GPU lost after start stays in the topology, with its links, shown unhealthy."""
    inventory, fake = dgx
    before = inventory.topology()
    lost = fake.uuids()[3]
    fake.lose_gpu(lost)
    after = inventory.rescan()
    assert after.uuids() == before.uuids()
    assert after.link(lost, fake.uuids()[0]) == before.link(lost, fake.uuids()[0])
    state = inventory.sample()[lost]
    assert not state.healthy and "cannot be read" in (state.health_reason or "")
    fake.restore_gpu(lost)
    inventory.rescan()
    assert inventory.sample()[lost].healthy


def test_rescan_finds_a_gpu_that_came_back() -> None:
    """A GPU lost at start joins the topology on the rescan after it is back."""
    inventory, fake = nvml_inventory("lost-gpu", xid_wait_ms=20)
    try:
        back = load_recording("lost-gpu")["devices"][2]["uuid"]
        assert back not in inventory.topology().uuids()
        fake.restore_gpu(back)
        topology = inventory.rescan()
        assert topology.by_index()[2].uuid == back
        assert inventory.problems() == ()
        assert inventory.sample()[back].healthy
    finally:
        inventory.close()


def test_failed_rescan_keeps_the_last_topology(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """If NVML itself fails during a rescan, the error is raised and nothing changes."""
    inventory, fake = dgx
    before = inventory.topology()
    fake.initialised = 0  # NVML was shut down under us: every call is UNINITIALIZED
    with pytest.raises(NvmlError, match="nvmlDeviceGetCount failed"):
        inventory.rescan()
    fake.initialised = 1
    assert inventory.topology() is before
