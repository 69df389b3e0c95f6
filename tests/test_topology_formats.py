"""Reading `nvidia-smi topo -m` text and the project's JSON topology format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuallocd.errors import InventoryError
from gpuallocd.model import PcieLevel
from gpuallocd.topology import (
    example_names,
    load_topology,
    parse_smi_topo,
    parse_topology,
    render_smi_topo,
    synthetic_uuid,
    topology_from_json,
    topology_to_json,
)


def test_workstation_text_with_nic_ansi_and_numa_columns() -> None:
    """The 4-GPU workstation reads with NVLink bridges, SYS across sockets, NUMA from affinity."""
    topo = load_topology("example:workstation-4gpu-nvbridge")
    g = topo.gpus
    assert [x.index for x in g] == [0, 1, 2, 3]
    assert topo.link(g[0].uuid, g[1].uuid).nvlinks == 4
    assert topo.link(g[2].uuid, g[3].uuid).nvlinks == 4
    assert topo.link(g[0].uuid, g[2].uuid).pcie is PcieLevel.SYS
    assert [x.numa_node for x in g] == [0, 0, 1, 1]
    assert g[0].cpu_affinity == "0-15,32-47"


def test_dgx1_volta_hybrid_cube_mesh() -> None:
    """DGX-1V: NV1/NV2 lanes as printed, SYS for cross-socket pairs without NVLink."""
    topo = load_topology("example:dgx1-volta")
    by_index = topo.by_index()

    def link(a: int, b: int):  # type: ignore[no-untyped-def]
        return topo.link(by_index[a].uuid, by_index[b].uuid)

    assert link(0, 3).nvlinks == 2 and link(0, 1).nvlinks == 1
    assert link(0, 5).nvlinks == 0 and link(0, 5).pcie is PcieLevel.SYS
    assert sum(link(0, b).nvlinks for b in range(1, 8)) == 6


def test_synthetic_uuids_are_stable() -> None:
    """The same index gets the same UUID on every read."""
    first = load_topology("example:dgx1-volta")
    second = load_topology("example:dgx1-volta")
    assert first.uuids() == second.uuids()
    assert first.gpus[3].uuid == synthetic_uuid(3)
    assert len(set(first.uuids())) == 8


def test_every_pcie_level_is_read() -> None:
    """PIX, PXB, PHB, NODE and SYS cells become the matching levels."""
    text = (
        "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\n"
        "GPU0\t X \tPIX\tPXB\tPHB\tNODE\tSYS\n"
        "GPU1\tPIX\t X \tPIX\tPIX\tPIX\tPIX\n"
        "GPU2\tPXB\tPIX\t X \tPIX\tPIX\tPIX\n"
        "GPU3\tPHB\tPIX\tPIX\t X \tPIX\tPIX\n"
        "GPU4\tNODE\tPIX\tPIX\tPIX\t X \tPIX\n"
        "GPU5\tSYS\tPIX\tPIX\tPIX\tPIX\t X \n"
    )
    topo = parse_smi_topo(text)
    g0 = topo.gpus[0].uuid
    levels = [topo.link(g0, g.uuid).pcie for g in topo.gpus[1:]]
    assert levels == [PcieLevel.PIX, PcieLevel.PXB, PcieLevel.PHB, PcieLevel.NODE, PcieLevel.SYS]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Legend:\n X = Self\n",
        "\tCPU Affinity\nfoo\tbar\n",
        "\tGPU0\tGPU1\nGPU0\t X \tZZZ\nGPU1\tZZZ\t X \n",
    ],
)
def test_garbage_text_is_an_inventory_error(text: str) -> None:
    """Text that is not a topology matrix is refused with a message."""
    with pytest.raises(InventoryError):
        parse_topology(text, name="bad")


def test_json_round_trip_keeps_every_field() -> None:
    """topology_to_json then topology_from_json gives the same topology."""
    for name in example_names():
        topo = load_topology(f"example:{name}")
        again = topology_from_json(json.loads(json.dumps(topology_to_json(topo))))
        assert again.gpus == topo.gpus, name
        assert {k: v for k, v in again.links.items() if v.nvlinks or v.pcie or v.xgmi} == {
            k: v for k, v in topo.links.items() if v.nvlinks or v.pcie or v.xgmi
        }, name


def test_nvswitch_fabric_links_every_pair() -> None:
    """A fabric entry links every pair of its GPUs with its lane count, marked nvswitch."""
    doc = {
        "gpus": [{"index": i} for i in range(4)],
        "links": [{"gpus": [0, 1], "pcie": "PXB"}],
        "nvswitch_fabrics": [{"gpus": [0, 1, 2, 3], "nvlinks": 12}],
    }
    topo = topology_from_json(doc)
    uuids = topo.uuids()
    for i in range(4):
        for j in range(i + 1, 4):
            link = topo.link(uuids[i], uuids[j])
            assert link.nvlinks == 12 and link.nvswitch
    assert topo.link(uuids[0], uuids[1]).pcie is PcieLevel.PXB


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"gpus": []},
        {"gpus": [{"index": 0}, {"index": 0}]},
        {"gpus": [{"index": -1}]},
        {"gpus": [{"index": 0}], "links": [{"gpus": [0, 5]}]},
        {"gpus": [{"index": 0}, {"index": 1}], "links": [{"gpus": [0, 1], "pcie": "FAST"}]},
        {"gpus": [{"index": 0}, {"index": 1}], "links": [{"gpus": [0, 1], "nvlinks": -1}]},
        {"format": "other/9", "gpus": [{"index": 0}]},
    ],
)
def test_invalid_json_topology_is_refused(doc: object) -> None:
    """Each malformed document is an InventoryError, never a crash."""
    with pytest.raises(InventoryError):
        topology_from_json(doc)


def test_rendered_matrix_reads_back(tmp_path: Path) -> None:
    """render_smi_topo prints a matrix that parses to the same links."""
    topo = load_topology("example:dgx1-volta")
    again = parse_smi_topo(render_smi_topo(topo))
    for a in topo.gpus:
        for b in topo.gpus:
            if a.index < b.index:
                assert again.link(a.uuid, b.uuid).nvlinks == topo.link(a.uuid, b.uuid).nvlinks


def test_missing_file_and_unknown_example_name_the_problem(tmp_path: Path) -> None:
    """A missing path or example name is a clear InventoryError."""
    with pytest.raises(InventoryError, match=r"missing\.txt"):
        load_topology(tmp_path / "missing.txt")
    with pytest.raises(InventoryError, match="known"):
        load_topology("example:no-such-machine")


def _as_a_terminal_shows(text: str) -> str:
    """The matrix as copied from a terminal: tabs expanded to 8-column stops, no trailing blanks."""
    return "\n".join(line.expandtabs(8).rstrip() for line in text.splitlines())


@pytest.mark.parametrize("name", ["dgx2", "synthetic-32gpu"])
def test_wide_matrices_read_back_from_a_terminal_copy(name: str) -> None:
    """16 and 32 GPUs: the printed matrix, copied with spaces, reads back link for link."""
    topo = load_topology(f"example:{name}")
    again = parse_smi_topo(_as_a_terminal_shows(render_smi_topo(topo)))
    assert len(again.gpus) == len(topo.gpus)
    for a, b in zip(topo.gpus, again.gpus, strict=True):
        assert a.numa_node == b.numa_node
        for c, d in zip(topo.gpus, again.gpus, strict=True):
            if a.index < c.index:
                theirs, ours = topo.link(a.uuid, c.uuid), again.link(b.uuid, d.uuid)
                assert ours.nvlinks == theirs.nvlinks
                assert theirs.nvlinks or ours.pcie is theirs.pcie
