"""AMD topology text: `rocm-smi --showtopo` and `amd-smi topology` read into the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuallocd.errors import InventoryError
from gpuallocd.model import PcieLevel
from gpuallocd.topology import parse_topology
from gpuallocd.topology.amd_text import is_amd_text, parse_amd_topo

CORPUS = Path(__file__).parent / "topologies"

ROCM_MI250_STYLE = """\
============================ ROCm System Management Interface ============================
================================ Weight between two GPUs =================================
       GPU0         GPU1         GPU2         GPU3
GPU0   0            15           30           72
GPU1   15           0            15           72
GPU2   30           15           0            72
GPU3   72           72           72           0

=============================== Link Type between two GPUs ===============================
       GPU0         GPU1         GPU2         GPU3
GPU0   0            XGMI         XGMI         PCIE
GPU1   XGMI         0            XGMI         PCIE
GPU2   XGMI         XGMI         0            PCIE
GPU3   PCIE         PCIE         PCIE         0

======================================= Numa Nodes =======================================
GPU[0]          : (Topology) Numa Node: 0
GPU[1]          : (Topology) Numa Node: 0
GPU[2]          : (Topology) Numa Node: 0
GPU[3]          : (Topology) Numa Node: 1
"""


ROCM_WEIGHT_READ_FAILED = """\
============================ ROCm System Management Interface ============================
================================ Weight between two GPUs =================================
get_link_weight_topology, Not supported on the given system
ERROR: GPU[2]   : Cannot read Link Weight: Not supported on this machine

       GPU0         GPU1         GPU2
GPU0   0            15           30
GPU1   15           0            15
GPU2   N/A          N/A          0

=============================== Link Type between two GPUs ===============================
       GPU0         GPU1         GPU2
GPU0   0            XGMI         XGMI
GPU1   XGMI         0            XGMI
GPU2   XGMI         XGMI         0
"""


def corpus(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8")


def test_rocm_smi_xgmi_mesh_reads_links_and_numa() -> None:
    """An 8-GPU XGMI mesh: one XGMI link per pair, NUMA nodes, PCIe level by socket."""
    topology = parse_amd_topo(corpus("amd-rocm-smi-8x-mi300-class-ms-swift.txt"))
    g = topology.gpus
    assert [x.vendor for x in g] == ["amd"] * 8
    assert [x.numa_node for x in g] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topology.link(g[0].uuid, g[1].uuid).xgmi == 1
    assert topology.link(g[0].uuid, g[7].uuid).pcie is PcieLevel.SYS


def test_xgmi_through_another_gpu_is_not_a_direct_link() -> None:
    """Weight 15 is one XGMI hop; weight 30 is XGMI through another GPU (hops say 1 for both)."""
    topology = parse_amd_topo(ROCM_MI250_STYLE)
    g = topology.gpus
    assert topology.link(g[0].uuid, g[1].uuid).xgmi == 1
    assert topology.link(g[0].uuid, g[2].uuid).xgmi == 0
    assert topology.link(g[0].uuid, g[2].uuid).pcie is PcieLevel.NODE
    assert topology.link(g[0].uuid, g[3].uuid).pcie is PcieLevel.SYS


def test_error_lines_between_a_title_and_its_table_are_skipped() -> None:
    """rocm-smi's `Cannot read Link Weight` lines before the table: the weights still count."""
    topology = parse_amd_topo(ROCM_WEIGHT_READ_FAILED)
    g = topology.gpus
    assert len(g) == 3
    assert topology.link(g[0].uuid, g[1].uuid).xgmi == 1
    assert topology.link(g[0].uuid, g[2].uuid).xgmi == 0


def test_a_table_of_link_types_under_another_title_reads_as_link_types() -> None:
    """XGMI and XXXX cells under the Weight title (a paste missing the Link Type title)."""
    topology = parse_amd_topo(corpus("amd-rocm-smi-12gpu-mi300-tpx-rocm-smi-lib-changelog.txt"))
    g = topology.gpus
    assert len(g) == 12
    assert topology.link(g[0].uuid, g[1].uuid).xgmi == 1
    assert topology.link(g[1].uuid, g[2].uuid).xgmi == 0
    assert topology.link(g[1].uuid, g[2].uuid).pcie is PcieLevel.NODE


def test_amd_smi_tables_by_bus_id_keep_the_bus_ids() -> None:
    """`amd-smi topology` rows and columns are PCI bus ids: they become the GPUs' bus ids."""
    topology = parse_amd_topo(corpus("amd-smi-8x-mi300x-amdsmi-changelog.txt"))
    assert topology.gpus[0].pci_bus_id == "0000:0c:00.0"
    assert topology.gpus[7].pci_bus_id == "0000:df:00.0"
    assert all(link.xgmi == 1 for link in topology.links.values())


def test_amd_smi_pcie_pair_two_hops_is_one_socket() -> None:
    """Two hops over PCIe (amd-smi's HOPS TABLE) is the same NUMA node: NODE."""
    topology = parse_amd_topo(corpus("amd-smi-2x-rx7900xtx-legacy-rocm-6074.txt"))
    a, b = topology.gpus
    assert topology.link(a.uuid, b.uuid).pcie is PcieLevel.NODE
    assert topology.link(a.uuid, b.uuid).xgmi == 0


def test_numa_table_alone_gives_gpus_and_socket_levels() -> None:
    """`rocm-smi --showtoponuma` alone: 8 GPUs, their nodes, NODE/SYS by node."""
    topology = parse_amd_topo(corpus("amd-rocm-smi-8gpu-numa-only-legacy-rocm-4740.txt"))
    g = topology.gpus
    assert len(g) == 8
    assert topology.link(g[0].uuid, g[3].uuid).pcie is PcieLevel.NODE
    assert topology.link(g[3].uuid, g[4].uuid).pcie is PcieLevel.SYS


def test_a_cut_numa_section_and_collapsed_spacing_still_read() -> None:
    """A copy that ends mid-line, and a table whose spacing a tracker collapsed, read."""
    cut = parse_amd_topo(corpus("amd-rocm-smi-4gpu-pcie-rocm-smi-lib-108.txt"))
    assert len(cut.gpus) == 4 and all(g.numa_node is None for g in cut.gpus)
    collapsed = parse_amd_topo(corpus("amd-rocm-smi-2x-mi100-rocm-1503.txt"))
    assert len(collapsed.gpus) == 2


def test_amd_text_is_recognised_and_nvidia_text_is_not() -> None:
    """The dispatcher sends rocm-smi and amd-smi text to the AMD reader, nvidia-smi text not."""
    assert is_amd_text(corpus("amd-smi-2x-rx7900xtx-legacy-rocm-6074.txt"))
    assert is_amd_text(corpus("amd-rocm-smi-1x-mi300x-vm-sglang-23342.txt"))
    assert not is_amd_text(corpus("nv-8x-rtx4090-go-gpuallocator-17.txt"))
    assert parse_topology(ROCM_MI250_STYLE, name="mi250").gpus[0].vendor == "amd"


def test_amd_text_without_gpus_is_refused() -> None:
    """Only the banner of rocm-smi: an InventoryError saying what was expected."""
    text = "============ ROCm System Management Interface ============\n"
    with pytest.raises(InventoryError, match="no GPU found in the AMD topology text"):
        parse_topology(text, name="banner")
