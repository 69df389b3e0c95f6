"""The amdsmi backend over recorded AMD machines: XGMI, PCIe, NUMA, partitions, health."""

from __future__ import annotations

import copy
import itertools
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from gpuallocd.errors import InventoryError
from gpuallocd.inventory import open_inventory
from gpuallocd.inventory.amd.backend import AmdInventory
from gpuallocd.inventory.base import NO_GPU_HINT
from gpuallocd.model import PcieLevel
from gpuallocd.testing import AMD_FORMAT, FakeAmdSmi, load_recording, recording_names


@pytest.fixture
def mi300x() -> Iterator[tuple[AmdInventory, FakeAmdSmi]]:
    fake = FakeAmdSmi.from_recording("amd-mi300x-8gpu")
    inventory = AmdInventory(amdsmi=fake, name=fake.name)
    yield inventory, fake
    inventory.close()


def test_bundled_amd_recordings() -> None:
    """Two AMD machines ship: an MI300X XGMI box and a PCIe-only MI210 box."""
    assert recording_names(AMD_FORMAT) == ["amd-mi300x-8gpu", "amd-pcie-mi210"]


def test_mi300x_is_a_full_xgmi_mesh(mi300x: tuple[AmdInventory, FakeAmdSmi]) -> None:
    """Every pair of the eight MI300X has one direct XGMI link; PCIe level from NUMA."""
    topology = mi300x[0].topology()
    gpus = topology.by_index()
    for a, b in itertools.combinations(range(8), 2):
        link = topology.link(gpus[a].uuid, gpus[b].uuid)
        assert link.xgmi == 1 and link.nvlinks == 0
        assert link.pcie is (PcieLevel.NODE if a // 4 == b // 4 else PcieLevel.SYS)


def test_amd_gpu_identity(mi300x: tuple[AmdInventory, FakeAmdSmi]) -> None:
    """Name, UUID, bus id, VRAM in bytes, NUMA node, gfx target and compute partition."""
    inventory, fake = mi300x
    gpu = inventory.topology().by_index()[5]
    assert (gpu.uuid, gpu.vendor, gpu.name) == (fake.uuids()[5], "amd", "AMD Instinct MI300X")
    assert (gpu.pci_bus_id, gpu.numa_node) == ("0000:a6:00.0", 1)
    assert (gpu.memory_total_bytes, gpu.compute_capability) == (192 * 2**30, "gfx942")
    assert gpu.compute_partition == "SPX"


def test_pcie_only_amd_box_has_no_xgmi() -> None:
    """MI210s without bridges talk over PCIe only; partitions are not supported there."""
    fake = FakeAmdSmi.from_recording("amd-pcie-mi210")
    inventory = AmdInventory(amdsmi=fake)
    try:
        topology = inventory.topology()
        gpus = topology.by_index()
        assert all(link.xgmi == 0 for link in topology.links.values())
        assert topology.link(gpus[0].uuid, gpus[1].uuid).pcie is PcieLevel.NODE
        assert topology.link(gpus[1].uuid, gpus[2].uuid).pcie is PcieLevel.SYS
        assert all(g.compute_partition is None for g in topology.gpus)
    finally:
        inventory.close()


def _cpx_on_last_gpu(recording: dict[str, Any], parts: int = 8) -> dict[str, Any]:
    """The MI300X box with its last GPU split into CPX partitions (one handle each)."""
    data = copy.deepcopy(recording)
    last = data["devices"].pop()
    base = len(data["devices"])
    for part in range(parts):
        entry = copy.deepcopy(last)
        entry.update(
            index=base + part,
            uuid=f"{last['uuid'][:-2]}{part:02x}",
            bdf=f"{last['bdf'][:-1]}{part}",
            compute_partition="CPX",
            vram_total_bytes=last["vram_total_bytes"] // parts,
        )
        data["devices"].append(entry)
    count = len(data["devices"])

    def cell(a: int, b: int) -> dict[str, int] | None:
        if a == b:
            return None
        return {"hops": 0, "type": 0} if min(a, b) >= base else {"hops": 1, "type": 2}

    data["links"] = [[cell(a, b) for b in range(count)] for a in range(count)]
    return data


def test_partitions_of_one_gpu_are_its_closest_pairs() -> None:
    """CPX partitions of one MI300X share its die: one XGMI hop at PIX between them."""
    fake = FakeAmdSmi(_cpx_on_last_gpu(load_recording("amd-mi300x-8gpu", AMD_FORMAT)))
    inventory = AmdInventory(amdsmi=fake)
    try:
        topology = inventory.topology()
        assert len(topology.gpus) == 15
        parts = [g for g in topology.gpus if g.compute_partition == "CPX"]
        assert len(parts) == 8
        link = topology.link(parts[0].uuid, parts[1].uuid)
        assert (link.xgmi, link.pcie) == (1, PcieLevel.PIX)
    finally:
        inventory.close()


def test_amd_sample_reports_use_and_owners(mi300x: tuple[AmdInventory, FakeAmdSmi]) -> None:
    """VRAM in use, gfx activity and processes with their owner's uid."""
    inventory, fake = mi300x
    uuid = fake.uuids()[2]
    fake.set_memory_used(uuid, 3 * 2**30)
    fake.set_processes(uuid, [(os.getpid(), 3 * 2**30)])
    state = inventory.sample()[uuid]
    assert state.healthy and state.memory_used_bytes == 3 * 2**30
    assert state.utilization_percent == 0.0
    assert [(p.pid, p.uid, p.used_memory_bytes) for p in state.processes] == [
        (os.getpid(), os.getuid(), 3 * 2**30)
    ]


def test_amd_gpu_that_cannot_be_read_is_unhealthy_alone(
    mi300x: tuple[AmdInventory, FakeAmdSmi],
) -> None:
    """One unreadable GPU is unhealthy with the reason; the others are fine; it recovers."""
    inventory, fake = mi300x
    lost = fake.uuids()[4]
    fake.lose_gpu(lost)
    states = inventory.sample()
    assert not states[lost].healthy
    assert "AMDSMI_STATUS_NOT_FOUND" in (states[lost].health_reason or "")
    assert sum(s.healthy for s in states.values()) == 7
    fake.restore_gpu(lost)
    assert inventory.sample()[lost].healthy


def test_amd_gpu_unreadable_at_discovery_is_reported(
    mi300x: tuple[AmdInventory, FakeAmdSmi],
) -> None:
    """Rescan leaves out a GPU it cannot read and says so."""
    inventory, fake = mi300x
    fake.lose_gpu(fake.uuids()[0])
    assert len(inventory.rescan().gpus) == 7
    (problem,) = inventory.problems()
    assert problem.startswith("AMD GPU 0 cannot be read")


@pytest.mark.parametrize(
    ("error", "advice"),
    [
        ("DRIVER_NOT_LOADED", "amdgpu kernel driver is not loaded"),
        ("NO_PERM", "render and video groups"),
        ("FAIL_LOAD_MODULE", "libamd_smi.so"),
        ("INIT_ERROR", "amdsmi could not start"),
    ],
)
def test_amd_start_failures_say_what_to_do(error: str, advice: str) -> None:
    """amdsmi start failures are one operator line with how to run without a GPU."""
    recording = load_recording("amd-pcie-mi210", AMD_FORMAT)
    recording["init_error"] = error
    with pytest.raises(InventoryError) as caught:
        AmdInventory(amdsmi=FakeAmdSmi(recording))
    assert advice in caught.value.message and NO_GPU_HINT in caught.value.message


def test_amdsmi_spec_without_amdsmi_installed_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--inventory amdsmi` without the extra says what to install."""
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    with pytest.raises(InventoryError, match=r"pip install gpuallocd\[amd\]"):
        open_inventory("amdsmi")


def test_amd_close_shuts_amdsmi_down(mi300x: tuple[AmdInventory, FakeAmdSmi]) -> None:
    """close() calls amdsmi_shut_down once, however often it is called."""
    inventory, fake = mi300x
    inventory.close()
    inventory.close()
    assert fake.calls["amdsmi_shut_down"] == 1 and fake.initialised == 0
