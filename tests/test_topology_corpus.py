"""The corpus of public topology outputs: every file reads, with its GPUs and every link,
and best-effort's pick for every request size is the brute-force optimum."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuallocd.model import Link, Topology
from gpuallocd.policies.base import AllocationRequest, NodeSnapshot
from gpuallocd.policies.best_effort import BestEffortPolicy
from gpuallocd.topology import load_topology
from tests.test_policy_support import best_by_brute_force

CORPUS = Path(__file__).parent / "topologies"


@dataclass(frozen=True)
class Expected:
    """What a corpus file says: per GPU its NUMA node, per pair (upper triangle) its link."""

    numa: tuple[int | None, ...]
    links: tuple[str, ...] = ()  # row i: the links of GPU i to GPUs i+1.. , space-separated
    vendor: str = "nvidia"


def uniform(count: int, cell: str) -> tuple[str, ...]:
    return tuple(" ".join([cell] * (count - 1 - i)) for i in range(count - 1))


def by_socket(count: int, same: str, across: str, numa: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(
        " ".join(same if numa[i] == numa[j] else across for j in range(i + 1, count))
        for i in range(count - 1)
    )


def xgmi_except_within(numa: tuple[int, ...], groups: tuple[set[int], ...]) -> tuple[str, ...]:
    """XGMI between every pair but those inside one group (rocm-smi's `XXXX`), level by node."""

    def cell(i: int, j: int) -> str:
        level = "NODE" if numa[i] == numa[j] else "SYS"
        return level if any({i, j} <= group for group in groups) else f"XGMI/{level}"

    count = len(numa)
    return tuple(" ".join(cell(i, j) for j in range(i + 1, count)) for i in range(count - 1))


TWO_SOCKETS = (0, 0, 0, 0, 1, 1, 1, 1)
MI300_TPX_NUMA = (0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3)
NONE4 = (None, None, None, None)

EXPECTED = {
    "nv-8x-rtx4090-go-gpuallocator-17.txt": Expected(TWO_SOCKETS, uniform(8, "SYS")),
    "nv-2x-rtx5090-club3090-1140.txt": Expected((0, 0), ("PHB",)),
    "nv-2gpu-indented-wrapped-legend-club3090-1125.txt": Expected((0, 0), ("NODE",)),
    "nv-2gpu-nv12-blank-affinity-vllm-19607.txt": Expected((None, None), ("NV12",)),
    "nv-5x-rtx4090-club3090-46.txt": Expected(
        (1, 0, 0, 0, 0), ("SYS SYS SYS SYS", "PHB NODE NODE", "NODE NODE", "PHB")
    ),
    "nv-2gpu-nv12-8nic-lmdeploy-1944.txt": Expected((1, 1), ("NV12",)),
    "nv-1x-tesla-p4-hami-99.txt": Expected((None,)),
    "nv-4gpu-soc-tensorflow-gdr.txt": Expected(NONE4, ("PHB SYS SYS", "SYS SYS", "PHB")),
    "nv-8x-h800-cut-columns-llm-action.txt": Expected(TWO_SOCKETS, uniform(8, "NV8")),
    "nv-8x-h100-sxm-kubernetes-recipes.txt": Expected(TWO_SOCKETS, uniform(8, "NV18")),
    "nv-2x-a100-della-gpu.txt": Expected((0, 1), ("SYS",)),
    "nv-4x-v100-power9-traverse.txt": Expected((0, 0, 8, 8), ("NV3 SYS SYS", "SYS SYS", "NV3")),
    "nv-3x-rtx-a6000-siboehm-bench.txt": Expected((0, 0, 0), ("NV4 NODE", "NODE")),
    "amd-rocm-smi-8x-mi300-class-ms-swift.txt": Expected(
        TWO_SOCKETS, by_socket(8, "XGMI/NODE", "XGMI/SYS", TWO_SOCKETS), "amd"
    ),
    "amd-smi-8x-mi300x-amdsmi-changelog.txt": Expected((None,) * 8, uniform(8, "XGMI"), "amd"),
    "amd-smi-2x-rx7900xtx-legacy-rocm-6074.txt": Expected((None, None), ("NODE",), "amd"),
    "amd-rocm-smi-1x-mi300x-vm-sglang-23342.txt": Expected((None,), (), "amd"),
    "amd-rocm-smi-2x-mi100-rocm-1503.txt": Expected((None, None), ("-",), "amd"),
    "amd-rocm-smi-8gpu-numa-only-legacy-rocm-4740.txt": Expected(
        TWO_SOCKETS, by_socket(8, "NODE", "SYS", TWO_SOCKETS), "amd"
    ),
    "amd-rocm-smi-4gpu-pcie-rocm-smi-lib-108.txt": Expected(NONE4, uniform(4, "SYS"), "amd"),
    "amd-rocm-smi-12gpu-mi300-tpx-rocm-smi-lib-changelog.txt": Expected(
        MI300_TPX_NUMA, xgmi_except_within(MI300_TPX_NUMA, ({1, 2, 3, 4}, {5, 6, 7, 8})), "amd"
    ),
}


def describe(link: Link) -> str:
    """A link as the expectations above write it: NV#, XGMI[/level], a PCIe level or -."""
    if link.nvlinks:
        return f"NV{link.nvlinks}"
    level = link.pcie.name if link.pcie is not None else None
    if link.xgmi:
        return "XGMI" if level is None else f"XGMI/{level}"
    return level or "-"


def link_rows(topology: Topology) -> tuple[str, ...]:
    gpus = topology.gpus
    return tuple(
        " ".join(describe(topology.link(a.uuid, b.uuid)) for b in gpus[i + 1 :])
        for i, a in enumerate(gpus[:-1])
    )


def corpus_files() -> list[str]:
    return sorted(p.name for p in CORPUS.glob("*.txt"))


def test_the_corpus_has_twenty_machines_of_both_vendors() -> None:
    """At least 20 files, each with expectations, NVIDIA and AMD, from 1 to more than 8 GPUs."""
    files = corpus_files()
    assert len(files) >= 20
    assert set(files) == set(EXPECTED)
    sizes = {len(e.numa) for e in EXPECTED.values()}
    assert min(sizes) == 1 and max(sizes) > 8
    assert {e.vendor for e in EXPECTED.values()} == {"nvidia", "amd"}


def test_every_corpus_file_is_named_in_the_readme() -> None:
    """The README gives a source for each file."""
    readme = (CORPUS / "README.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in readme for name in corpus_files())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file_reads_with_its_gpus_and_links(name: str) -> None:
    """GPU count, vendor, NUMA node of each GPU and the link of every pair are as posted."""
    expected = EXPECTED[name]
    topology = load_topology(CORPUS / name)
    assert [g.index for g in topology.gpus] == list(range(len(expected.numa)))
    assert {g.vendor for g in topology.gpus} == {expected.vendor}
    assert tuple(g.numa_node for g in topology.gpus) == expected.numa
    assert link_rows(topology) == expected.links


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_best_effort_pick_is_optimal_for_every_size(name: str) -> None:
    """For 1..N GPUs on the idle machine, best-effort gives the brute force's set, proven."""
    topology = load_topology(CORPUS / name)
    snapshot = NodeSnapshot.from_busy(topology, busy=frozenset())
    policy = BestEffortPolicy()
    for count in range(1, len(topology.gpus) + 1):
        request = AllocationRequest(count=count)
        choice = policy.choose(snapshot, request)
        assert choice.gpus == best_by_brute_force(snapshot, request), count
        assert choice.exact, count


@pytest.mark.parametrize(
    "name", ["nv-5x-rtx4090-club3090-46.txt", "nv-3x-rtx-a6000-siboehm-bench.txt"]
)
def test_best_effort_stays_optimal_with_gpus_leased(name: str) -> None:
    """With GPU 1 leased, every size that still fits is the brute force's set."""
    topology = load_topology(CORPUS / name)
    snapshot = NodeSnapshot.from_busy(topology, busy=frozenset({topology.gpus[1].uuid}))
    for count in range(1, len(topology.gpus)):
        request = AllocationRequest(count=count)
        choice = BestEffortPolicy().choose(snapshot, request)
        assert choice.gpus == best_by_brute_force(snapshot, request), count
