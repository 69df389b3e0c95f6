"""NVML discovery over recorded machines: identity, PCIe, NVLinks, NVSwitch fabrics, MIG."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.inventory.nvml.discovery import format_cpus
from gpuallocd.inventory.nvml.links import normalize_bus_id
from gpuallocd.model import PcieLevel, Topology
from gpuallocd.testing import FakeNvml, load_recording
from gpuallocd.topology import load_topology

Open = Callable[..., tuple[NvmlInventory, FakeNvml]]


@pytest.fixture
def open_recording() -> Iterator[Open]:
    """Open an NvmlInventory over a recording (a name, or a recording dict to tweak)."""
    opened: list[NvmlInventory] = []

    def open_(recording: str | dict[str, Any]) -> tuple[NvmlInventory, FakeNvml]:
        data = load_recording(recording) if isinstance(recording, str) else recording
        fake = FakeNvml(data)
        inventory = NvmlInventory(nvml=fake, name=fake.name, xid_wait_ms=20)
        opened.append(inventory)
        return inventory, fake

    yield open_
    for inventory in opened:
        inventory.close()


def _pairs(topology: Topology) -> Iterator[tuple[int, int]]:
    return itertools.combinations(range(len(topology.gpus)), 2)


def _link(topology: Topology, a: int, b: int) -> Any:
    gpus = topology.by_index()
    return topology.link(gpus[a].uuid, gpus[b].uuid)


def test_dgx_a100_nvswitch_fabric_links_every_pair(open_recording: Open) -> None:
    """NVLinks to NVSwitches make one fabric: every pair of the 8 GPUs is NV12."""
    topology = open_recording("dgx-a100-mig")[0].topology()
    assert len(topology.gpus) == 8
    for a, b in _pairs(topology):
        link = _link(topology, a, b)
        assert (link.nvlinks, link.nvswitch) == (12, True), (a, b)


def test_dgx_a100_keeps_the_pcie_path_behind_nvlinks(open_recording: Open) -> None:
    """GPUs sharing a PCIe switch are PXB, others SYS, even where NVLink joins them."""
    topology = open_recording("dgx-a100-mig")[0].topology()
    assert _link(topology, 0, 1).pcie is PcieLevel.PXB
    assert _link(topology, 0, 2).pcie is PcieLevel.SYS
    assert _link(topology, 6, 7).pcie is PcieLevel.PXB


def test_dgx1_direct_nvlinks_match_the_published_matrix(open_recording: Open) -> None:
    """The DGX-1V hybrid cube-mesh reads as `nvidia-smi topo -m` prints it (NV1/NV2/SYS)."""
    discovered = open_recording("dgx1-volta")[0].topology()
    published = load_topology("example:dgx1-volta")
    for a, b in _pairs(published):
        assert _link(discovered, a, b).nvlinks == _link(published, a, b).nvlinks, (a, b)
        assert not _link(discovered, a, b).nvswitch
    assert [g.numa_node for g in discovered.gpus] == [g.numa_node for g in published.gpus]
    assert [g.cpu_affinity for g in discovered.gpus] == [g.cpu_affinity for g in published.gpus]


def test_pcie_only_box_has_levels_and_no_nvlinks(open_recording: Open) -> None:
    """Without NVLink every pair is a PCIe level: PIX under one switch, NODE, SYS across."""
    topology = open_recording("pcie-dual-socket")[0].topology()
    assert all(link.nvlinks == 0 for link in topology.links.values())
    assert _link(topology, 0, 1).pcie is PcieLevel.PIX
    assert _link(topology, 2, 3).pcie is PcieLevel.NODE
    assert _link(topology, 1, 2).pcie is PcieLevel.SYS


def test_gpu_identity_and_placement(open_recording: Open) -> None:
    """Name, UUID, bus id, memory in bytes, NUMA node, CPU list and compute capability."""
    inventory, fake = open_recording("h200-single")
    (gpu,) = inventory.topology().gpus
    assert gpu.uuid == fake.uuids()[0] and gpu.uuid.startswith("GPU-")
    assert (gpu.index, gpu.name, gpu.pci_bus_id) == (0, "NVIDIA H200", "00000000:19:00.0")
    assert gpu.memory_total_bytes == 143771 * 2**20
    assert (gpu.numa_node, gpu.cpu_affinity, gpu.compute_capability) == (0, "0-15", "9.0")
    assert (gpu.vendor, gpu.mig_mode, gpu.mig_devices) == ("nvidia", False, ())


def test_mig_instances_are_recorded_on_their_gpu(open_recording: Open) -> None:
    """GPU 7 of the DGX A100 is in MIG mode: its instances, profiles and memory are listed."""
    topology = open_recording("dgx-a100-mig")[0].topology()
    gpu7 = topology.by_index()[7]
    assert gpu7.mig_mode
    assert [m.profile for m in gpu7.mig_devices] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert [m.gpu_instance_id for m in gpu7.mig_devices] == [2, 3, 9, 10]
    assert gpu7.mig_devices[0].memory_total_bytes == 40192 * 2**20
    assert all(m.uuid.startswith("MIG-") for m in gpu7.mig_devices)
    assert not any(g.mig_mode for g in topology.gpus if g.index != 7)


def test_mig_pending_is_not_mig_enabled(open_recording: Open) -> None:
    """MIG that takes effect only after a reset is not reported as enabled."""
    recording = load_recording("h200-single")
    recording["devices"][0]["mig_mode"] = [0, 1]
    (gpu,) = open_recording(recording)[0].topology().gpus
    assert not gpu.mig_mode and gpu.mig_devices == ()


def test_gpu_lost_before_start_is_left_out_and_reported(open_recording: Open) -> None:
    """A GPU that fell off the bus never stops discovery of the others."""
    inventory, _ = open_recording("lost-gpu")
    assert [g.index for g in inventory.topology().gpus] == [0, 1, 3]
    (problem,) = inventory.problems()
    assert problem.startswith("GPU 2 cannot be read")
    assert "fallen off the bus" in problem and "Xid 79" in problem


def test_topology_is_cached_not_rediscovered(open_recording: Open) -> None:
    """topology() and sample() never repeat NVLink or PCIe queries; only rescan does."""
    inventory, fake = open_recording("dgx-a100-mig")
    before = (
        fake.calls["nvmlDeviceGetNvLinkState"],
        fake.calls["nvmlDeviceGetTopologyCommonAncestor"],
    )
    for _ in range(5):
        inventory.topology()
        inventory.sample()
    after = (
        fake.calls["nvmlDeviceGetNvLinkState"],
        fake.calls["nvmlDeviceGetTopologyCommonAncestor"],
    )
    assert after == before
    inventory.rescan()
    assert fake.calls["nvmlDeviceGetNvLinkState"] > before[0]


def test_far_end_of_unknown_type_that_is_no_gpu_counts_as_a_switch(open_recording: Open) -> None:
    """Drivers that cannot name the far end still give a fabric, by the far end's bus id."""
    recording = load_recording("dgx-a100-mig")
    for device in recording["devices"]:
        for link in device["nvlinks"]:
            link["remote_device_type"] = {"error": "NOT_SUPPORTED"}
    topology = open_recording(recording)[0].topology()
    assert all(link.nvswitch and link.nvlinks == 12 for link in topology.links.values())


def test_gpus_on_different_switches_are_different_fabrics(open_recording: Open) -> None:
    """Two NVSwitch partitions: pairs across them get no NVLink."""
    recording = load_recording("dgx-a100-mig")
    for device in recording["devices"]:
        side = "A" if device["index"] < 4 else "B"
        for link in device["nvlinks"]:
            link["remote_pci_bus_id"] = f"00000000:{side}0:00.0"
    topology = open_recording(recording)[0].topology()
    assert _link(topology, 0, 3).nvswitch and _link(topology, 0, 3).nvlinks == 12
    assert not _link(topology, 3, 4).nvswitch and _link(topology, 3, 4).nvlinks == 0


def test_switch_links_without_bus_ids_form_one_fabric(open_recording: Open) -> None:
    """Where NVML cannot give the switch's bus id, all switch-linked GPUs share one fabric."""
    recording = load_recording("dgx-a100-mig")
    for device in recording["devices"]:
        for link in device["nvlinks"]:
            link["remote_pci_bus_id"] = {"error": "NOT_SUPPORTED"}
    topology = open_recording(recording)[0].topology()
    assert all(link.nvswitch and link.nvlinks == 12 for link in topology.links.values())


def test_fabric_lanes_are_the_fewer_of_the_two_gpus(open_recording: Open) -> None:
    """A GPU with a link down reaches the fabric with fewer lanes."""
    recording = load_recording("dgx-a100-mig")
    recording["devices"][5]["nvlinks"][0]["active"] = False
    topology = open_recording(recording)[0].topology()
    assert _link(topology, 5, 6).nvlinks == 11
    assert _link(topology, 6, 7).nvlinks == 12


def test_unknown_pcie_path_is_none(open_recording: Open) -> None:
    """Where NVML cannot tell the common ancestor (some VMs), the PCIe level is unknown."""
    recording = load_recording("pcie-dual-socket")
    recording["common_ancestor"] = {"error": "NOT_SUPPORTED"}
    topology = open_recording(recording)[0].topology()
    assert all(link.pcie is None for link in topology.links.values())


def test_format_cpus_compresses_ranges() -> None:
    """CPU lists print the way Linux and `nvidia-smi topo -m` print them."""
    assert format_cpus([0, 1, 2, 3, 40, 41, 7]) == "0-3,7,40-41"
    assert format_cpus([]) == ""


def test_bus_ids_compare_across_formats() -> None:
    """NVML's 8-digit domain and the 4-digit form name the same device."""
    assert normalize_bus_id("00000000:0A:00.0") == normalize_bus_id("0000:0a:00.0")
    assert normalize_bus_id("garbage") == "garbage"
