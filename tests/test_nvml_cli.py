"""`gpuallocctl topology` read locally: the `topo -m` matrix, the JSON document, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest
from click.testing import CliRunner, Result

from gpuallocd.cli import cli
from gpuallocd.inventory import open_inventory
from gpuallocd.topology import load_topology, parse_smi_topo, topology_from_json


def ctl(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def test_topology_prints_the_matrix_nvidia_smi_prints() -> None:
    """The DGX-1V read through NVML prints the published `nvidia-smi topo -m` matrix."""
    result = ctl("topology", "--inventory", "nvml-recording:dgx1-volta")
    assert result.exit_code == 0, result.output
    printed = parse_smi_topo(result.output)
    published = load_topology("example:dgx1-volta")
    assert printed.links == published.links
    assert [g.cpu_affinity for g in printed.gpus] == [g.cpu_affinity for g in published.gpus]


def test_topology_json_replays_as_the_same_node(tmp_path: Path) -> None:
    """--json (local or the group's) is the JSON document that replays as the same node."""
    local = ctl("topology", "--json", "--inventory", "nvml-recording:dgx-a100-mig")
    group = ctl("--json", "topology", "--inventory", "nvml-recording:dgx-a100-mig")
    assert local.exit_code == 0 and group.exit_code == 0, local.output
    assert json.loads(local.output) == json.loads(group.output)
    path = tmp_path / "node.json"
    path.write_text(local.output)
    inventory = open_inventory("nvml-recording:dgx-a100-mig")
    try:
        replayed, discovered = load_topology(path), inventory.topology()
        assert replayed.links == discovered.links
        assert replayed.uuids() == discovered.uuids()
        assert [g.cpu_affinity for g in replayed.gpus] == [g.cpu_affinity for g in discovered.gpus]
    finally:
        inventory.close()


def test_topology_of_an_amd_recording() -> None:
    """AMD machines print too: PCIe levels from NUMA placement."""
    result = ctl("topology", "--inventory", "amd-recording:amd-pcie-mi210")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].split("\t")[1:5] == [" X ", "NODE", "SYS", "SYS"]


def test_topology_local_without_a_driver_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """--local on a node without the NVIDIA driver: the operator message, no traceback."""

    def no_library(*args: object) -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", no_library)
    result = ctl("topology", "--local")
    assert result.exit_code == 1
    assert result.output.startswith("Error: NVML could not be loaded")
    assert "Traceback" not in result.output and result.exception.__class__ is SystemExit


def test_topology_with_an_unknown_recording_lists_the_known() -> None:
    """A typo in a recording name is one line naming the bundled recordings."""
    result = ctl("topology", "--inventory", "nvml-recording:dgx-a1000")
    assert result.exit_code == 1
    assert "no bundled recording 'dgx-a1000'; known: dgx-a100-mig" in result.output


def test_topology_of_a_machine_with_a_lost_gpu_shows_the_others() -> None:
    """A lost GPU does not stop the topology of the rest from printing."""
    result = ctl("--json", "topology", "--inventory", "nvml-recording:lost-gpu")
    assert result.exit_code == 0, result.output
    topology = topology_from_json(json.loads(result.stdout))
    assert [g.index for g in topology.gpus] == [0, 1, 3]
