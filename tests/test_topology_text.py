"""The `nvidia-smi topo -m` reader on each odd format people paste, and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuallocd.errors import InventoryError
from gpuallocd.model import PcieLevel, Topology
from gpuallocd.topology import parse_smi_topo, parse_topology
from gpuallocd.topology.smi_text import numa_node_of

CORPUS = Path(__file__).parent / "topologies"


def corpus(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8")


def same_node(a: Topology, b: Topology) -> bool:
    return a.gpus == b.gpus and dict(a.links) == dict(b.links)


def test_space_aligned_paste_reads_like_the_tab_separated_original() -> None:
    """Tabs turned into runs of spaces (a terminal copy) give the same topology."""
    original = corpus("nv-8x-rtx4090-go-gpuallocator-17.txt")
    spaced = "\n".join(line.expandtabs(8) for line in original.splitlines())
    assert "\t" not in spaced
    assert same_node(parse_smi_topo(spaced), parse_smi_topo(original))


def test_indented_paste_with_single_space_header_reads() -> None:
    """An indented matrix whose header separates `GPU0 GPU1` by one space reads."""
    topology = parse_smi_topo(corpus("nv-2gpu-indented-wrapped-legend-club3090-1125.txt"))
    a, b = topology.gpus
    assert topology.link(a.uuid, b.uuid).pcie is PcieLevel.NODE
    assert a.cpu_affinity == "0-15"


def test_soc_from_old_drivers_reads_as_sys() -> None:
    """`SOC` (drivers before 2017) is the SMP link between sockets, as `SYS` is now."""
    topology = parse_smi_topo(corpus("nv-4gpu-soc-tensorflow-gdr.txt"))
    g = topology.gpus
    assert topology.link(g[0].uuid, g[2].uuid).pcie is PcieLevel.SYS
    assert topology.link(g[0].uuid, g[1].uuid).pcie is PcieLevel.PHB


@pytest.mark.parametrize(
    "name", ["nv-1x-tesla-p4-hami-99.txt", "nv-3x-rtx-a6000-siboehm-bench.txt"]
)
def test_prompt_and_prose_lines_around_the_matrix_are_skipped(name: str) -> None:
    """Shell prompts (`root@host:/# `, `> `), Markdown fences and prose do not stop the read."""
    text = corpus(name)
    assert "nvidia-smi topo -m" in text.splitlines()[0] + text.splitlines()[2]
    assert parse_smi_topo(text).gpus


@pytest.mark.parametrize("prefix", ["> ", ">> ", "> > ", ">"])
def test_mail_quote_prefixes_are_removed(prefix: str) -> None:
    """A matrix quoted in a mail reply reads as the unquoted one."""
    original = corpus("nv-5x-rtx4090-club3090-46.txt")
    quoted = "\n".join(prefix + line for line in original.splitlines())
    assert same_node(parse_smi_topo(quoted), parse_smi_topo(original))


def test_crlf_line_ends_are_read() -> None:
    """A paste saved with Windows line ends reads as the original."""
    original = corpus("nv-4x-v100-power9-traverse.txt")
    assert same_node(parse_smi_topo(original.replace("\n", "\r\n")), parse_smi_topo(original))


def test_ansi_codes_are_ignored() -> None:
    """Colour and underline escape codes around cells are dropped."""
    original = corpus("nv-2x-a100-della-gpu.txt")
    coloured = original.replace("GPU0\t", "\x1b[4mGPU0\x1b[0m\t").replace(
        "SYS", "\x1b[1;31mSYS\x1b[0m"
    )
    assert same_node(parse_smi_topo(coloured), parse_smi_topo(original))


def test_nic_rows_columns_and_nic_legend_are_ignored() -> None:
    """NIC columns between the GPUs' and the affinity columns, NIC rows, the NIC legend."""
    topology = parse_smi_topo(corpus("nv-8x-h800-cut-columns-llm-action.txt"))
    assert len(topology.gpus) == 8
    assert {link.nvlinks for link in topology.links.values()} == {8}


def test_nic_columns_and_rows_in_any_order() -> None:
    """A NIC column before the GPU columns and NIC rows first still give GPU links."""
    text = (
        "\tNIC0\tGPU0\tGPU1\tCPU Affinity\n"
        "NIC0\t X \tPIX\tSYS\n"
        "GPU0\tPIX\t X \tNV2\t0-7\n"
        "GPU1\tSYS\tNV2\t X \t8-15\n"
    )
    topology = parse_smi_topo(text)
    a, b = topology.gpus
    assert topology.link(a.uuid, b.uuid).nvlinks == 2
    assert (a.cpu_affinity, b.cpu_affinity) == ("0-7", "8-15")


def test_numa_ranges_and_na_read_as_one_node_or_unknown() -> None:
    """`3` and `3-3` name node 3; `N/A`, blank and `0-1` (several nodes) are unknown."""
    assert [numa_node_of(c) for c in ("3", "3-3", "N/A", "", None, "0-1", "0,1")] == [
        3,
        3,
        None,
        None,
        None,
        None,
        None,
    ]
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tSYS\t0-63\t0-1\t\tN/A\n"
        "GPU1\tSYS\t X \t64-127\t1\t\tN/A\n"
    )
    assert [g.numa_node for g in parse_smi_topo(text).gpus] == [None, 1]


def test_blank_and_missing_affinity_columns() -> None:
    """Blank affinity cells read as unknown; a header with no affinity columns still reads."""
    blank = parse_smi_topo(corpus("nv-2gpu-nv12-blank-affinity-vllm-19607.txt"))
    assert [(g.cpu_affinity, g.numa_node) for g in blank.gpus] == [(None, None), (None, None)]
    bare = parse_smi_topo("\tGPU0\tGPU1\nGPU0\t X \tPXB\nGPU1\tPXB\t X \n")
    a, b = bare.gpus
    assert bare.link(a.uuid, b.uuid).pcie is PcieLevel.PXB
    assert a.cpu_affinity is None


def test_cells_glued_where_a_tab_was_lost_are_split() -> None:
    """`GPU0GPU1` in a header and `SYSSYS` in a row are split back into cells."""
    text = "\tGPU0GPU1\tGPU2\nGPU0\t X \tNV1SYS\nGPU1\tNV1\t X \tSYS\nGPU2\tSYS\tSYS\t X \n"
    topology = parse_smi_topo(text)
    g = topology.gpus
    assert topology.link(g[0].uuid, g[1].uuid).nvlinks == 1
    assert topology.link(g[0].uuid, g[2].uuid).pcie is PcieLevel.SYS


@pytest.mark.parametrize(
    "name",
    ["nv-2gpu-nv12-blank-affinity-vllm-19607.txt", "nv-8x-h800-cut-columns-llm-action.txt"],
)
def test_a_legend_cut_midway_is_not_needed(name: str) -> None:
    """The post ends inside the legend, or its lines are cut at the terminal's width."""
    assert parse_smi_topo(corpus(name)).gpus


def test_one_gpu_has_no_links() -> None:
    """A single-GPU matrix is one GPU and no pair."""
    topology = parse_smi_topo(corpus("nv-1x-tesla-p4-hami-99.txt"))
    assert len(topology.gpus) == 1 and not topology.links
    assert topology.gpus[0].cpu_affinity == "0-7"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("\tGPU0\tGPU1\nGPU0\t X \tFAST\nGPU1\tFAST\t X \n", 2, "unknown link kind 'FAST'"),
        (
            "intro\n\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPIX\nGPU1\tPIX\t X \tPIX\nGPU2\tPIX\tPIX\t X\n",
            3,
            "too short",
        ),
        ("\tGPU0\tGPU1\nGPU0\t X \tPIX\nmlx5_0\tPIX\tPIX\t X\n", 1, "no row of the matrix"),
        ("hello\nGPU0 is fine, GPU1 is hot\n", 2, "no `nvidia-smi topo -m` matrix"),
    ],
)
def test_unreadable_text_is_one_error_naming_the_line(text: str, line: int, words: str) -> None:
    """Each unreadable file gives one InventoryError whose message starts with its line."""
    with pytest.raises(InventoryError) as caught:
        parse_topology(text, name="pasted")
    assert caught.value.message.startswith(f"topology pasted: line {line}: ")
    assert words in caught.value.message
    assert caught.value.details == {"line": line}


def test_text_naming_no_gpu_says_so() -> None:
    """Text with no GPU label at all is refused with what was expected."""
    with pytest.raises(InventoryError, match="no line names a GPU column"):
        parse_topology("just some words\n", name="pasted")


MIG_LISTING = """$ nvidia-smi -L
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)
  MIG 3g.20gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)
  MIG 2g.10gb     Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)
  MIG 1g.5gb      Device  2: (UUID: MIG-1e099852-3624-56c0-8064-c5db1211e44f)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-4e8a0ea2-2f44-4b5a-b6f4-5b3cf0b5d1a2)
"""


def test_a_mig_device_listing_beside_the_matrix_is_skipped() -> None:
    """`nvidia-smi -L` lines of MIG devices (`  MIG 1g.5gb  Device 0: ...`), as people paste
    them with the matrix of a MIG host, neither stop the read nor add devices."""
    name = "nv-2x-a100-della-gpu.txt"
    before = parse_smi_topo(MIG_LISTING + corpus(name))
    after = parse_smi_topo(corpus(name) + "\n" + MIG_LISTING)
    assert same_node(before, parse_smi_topo(corpus(name)))
    assert same_node(after, parse_smi_topo(corpus(name)))
