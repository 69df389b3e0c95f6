"""The NVML backend against this machine's real GPUs, compared with nvidia-smi and sysfs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuallocd.inventory.nvml.api import NvmlApi
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.topology import parse_smi_topo
from tests.gpu.conftest import nvidia_smi

pytestmark = pytest.mark.gpu

_BUS_ID = re.compile(r"^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


def _cpus(cpulist: str) -> set[int]:
    found: set[int] = set()
    for part in cpulist.split(","):
        first, _, last = part.partition("-")
        found.update(range(int(first), int(last or first) + 1))
    return found


def test_discovery_finds_every_gpu_nvml_counts(
    nvml_api: NvmlApi, real_inventory: NvmlInventory
) -> None:
    """Every GPU NVML counts is discovered, or reported as a problem."""
    topology = real_inventory.topology()
    assert len(topology.gpus) + len(real_inventory.problems()) == nvml_api.device_count()
    assert [g.index for g in topology.gpus] == sorted(g.index for g in topology.gpus)


def test_uuids_and_bus_ids_match_nvidia_smi(real_inventory: NvmlInventory) -> None:
    """UUID, PCI bus id and name of each GPU are what nvidia-smi reports for its index."""
    rows = nvidia_smi("--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader")
    reported = {int(r.split(", ")[0]): r.split(", ")[1:] for r in rows.strip().splitlines()}
    for gpu in real_inventory.topology().gpus:
        uuid, bus_id, name = reported[gpu.index]
        assert gpu.uuid == uuid and gpu.uuid.startswith("GPU-")
        assert gpu.pci_bus_id is not None and _BUS_ID.match(gpu.pci_bus_id)
        assert gpu.pci_bus_id.lower() == bus_id.lower()
        assert gpu.name == name


def test_memory_total_matches_nvidia_smi(real_inventory: NvmlInventory) -> None:
    """Total memory in bytes is nvidia-smi's MiB figure times 2**20."""
    rows = nvidia_smi("--query-gpu=index,memory.total", "--format=csv,noheader,nounits")
    mib = {int(i): int(m) for i, m in (r.split(", ") for r in rows.strip().splitlines())}
    for gpu in real_inventory.topology().gpus:
        assert gpu.memory_total_bytes == mib[gpu.index] * 2**20


def test_numa_node_and_cpu_affinity_match_sysfs(real_inventory: NvmlInventory) -> None:
    """The NUMA node is the kernel's for the GPU's PCI device; its CPUs are online CPUs."""
    online = _cpus(Path("/sys/devices/system/cpu/online").read_text().strip())
    for gpu in real_inventory.topology().gpus:
        assert gpu.pci_bus_id is not None
        sysfs = Path("/sys/bus/pci/devices") / gpu.pci_bus_id.lower()[-12:] / "numa_node"
        if sysfs.exists() and int(sysfs.read_text()) >= 0:
            assert gpu.numa_node == int(sysfs.read_text())
        if gpu.cpu_affinity is not None:
            assert _cpus(gpu.cpu_affinity) <= online


def test_links_match_nvidia_smi_topo_matrix(real_inventory: NvmlInventory) -> None:
    """NVLink lanes and PCIe levels agree with `nvidia-smi topo -m` read by our own reader."""
    topology = real_inventory.topology()
    printed = parse_smi_topo(nvidia_smi("topo", "-m"))
    assert len(printed.gpus) == len(topology.gpus)
    ours, theirs = topology.by_index(), printed.by_index()
    for a in topology.gpus:
        for b in topology.gpus:
            if a.index < b.index:
                mine = topology.link(a.uuid, b.uuid)
                seen = printed.link(theirs[a.index].uuid, theirs[b.index].uuid)
                assert mine.nvlinks == seen.nvlinks, (a.index, b.index)
                if not seen.nvlinks:
                    assert mine.pcie == seen.pcie, (a.index, b.index)
    assert set(ours) == set(theirs)


def test_mig_instances_match_nvidia_smi_list(real_inventory: NvmlInventory) -> None:
    """Each GPU in MIG mode lists the MIG devices `nvidia-smi -L` shows under it."""
    mig_gpus = [g for g in real_inventory.topology().gpus if g.mig_mode]
    if not mig_gpus:
        pytest.skip("no GPU is in MIG mode on this machine")
    listing = nvidia_smi("-L")
    for gpu in mig_gpus:
        block = listing.split(f"GPU {gpu.index}:")[1].split("\nGPU ")[0]
        listed = set(re.findall(r"UUID: (MIG-[^)]+)\)", block))
        assert {m.uuid for m in gpu.mig_devices} == listed
