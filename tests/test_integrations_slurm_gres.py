"""gres.conf lines for Slurm: Links= from the topology, in Slurm's order; `slurm-gres`."""

from __future__ import annotations

import re

from click.testing import CliRunner

from gpuallocd.cli import cli
from gpuallocd.integrations import device_files, gres_lines, link_weight
from gpuallocd.model import Link, PcieLevel
from gpuallocd.topology import load_topology
from tests.harness import ThreadDaemon


def links_matrix(lines: list[str]) -> list[list[int]]:
    return [
        [int(x) for x in re.search(r"Links=(\S+)", line).group(1).split(",")]  # type: ignore[union-attr]
        for line in lines
        if not line.startswith("#")
    ]


def test_link_weight_counts_nvlinks_and_xgmi_not_pcie() -> None:
    """NVLink and xGMI counts pass through; an NVSwitch counts one; PCIe counts none."""
    assert link_weight(Link(nvlinks=2)) == 2
    assert link_weight(Link(xgmi=4)) == 4
    assert link_weight(Link(nvswitch=True)) == 1
    assert link_weight(Link(pcie=PcieLevel.PIX)) == 0


def test_dgx1_links_follow_the_hybrid_cube_mesh() -> None:
    """On a DGX-1V the matrix is symmetric, -1 on the diagonal, NV2 pairs as 2, SYS as 0."""
    topology = load_topology("example:dgx1-volta")
    matrix = links_matrix(gres_lines(topology, device_files(topology.gpus, {})))
    assert len(matrix) == 8
    assert all(matrix[i][i] == -1 for i in range(8))
    assert all(matrix[i][j] == matrix[j][i] for i in range(8) for j in range(8))
    assert matrix[0] == [-1, 1, 1, 2, 2, 0, 0, 0]


def test_lines_follow_device_file_order_and_carry_uuids() -> None:
    """GPUs are listed by device file (nvidia2 before nvidia10), each after a UUID comment."""
    topology = load_topology("example:workstation-4gpu-nvbridge")
    uuids = topology.uuids()
    files = {uuids[0]: "/dev/nvidia10", uuids[1]: "/dev/nvidia2"}
    files |= {uuids[2]: "/dev/nvidia3", uuids[3]: "/dev/nvidia1"}
    lines = gres_lines(topology, files, node_name="gpu01", gpu_type="a6000")
    gres = [line for line in lines if not line.startswith("#")]
    assert [re.search(r"File=(\S+)", g).group(1) for g in gres] == [  # type: ignore[union-attr]
        "/dev/nvidia1",
        "/dev/nvidia2",
        "/dev/nvidia3",
        "/dev/nvidia10",
    ]
    assert gres[0].startswith("NodeName=gpu01 Name=gpu Type=a6000 File=/dev/nvidia1 Links=-1,")
    assert f"# index 3: {uuids[3]}" in lines


def test_cli_offline_and_without_links() -> None:
    """`slurm-gres --topology` needs no daemon; `--no-links` drops Links=."""
    runner = CliRunner()
    with_links = runner.invoke(cli, ["slurm-gres", "--topology", "example:dgx1-volta"])
    without = runner.invoke(cli, ["slurm-gres", "--topology", "example:dgx1-volta", "--no-links"])
    assert with_links.exit_code == 0 and without.exit_code == 0
    assert with_links.output.count("Links=") == 8
    assert "Links=" not in without.output and without.output.count("Name=gpu") == 8


def test_cli_reads_the_topology_from_the_daemon(daemon: ThreadDaemon) -> None:
    """Without --topology, the daemon's topology gives the same lines as the file does."""
    runner = CliRunner()
    from_daemon = runner.invoke(cli, ["--socket", str(daemon.paths.socket), "slurm-gres"])
    offline = runner.invoke(cli, ["slurm-gres", "--topology", "example:workstation-4gpu-nvbridge"])
    assert from_daemon.exit_code == 0, from_daemon.output
    assert from_daemon.output.splitlines()[1:] == offline.output.splitlines()[1:]


def test_cli_reports_an_unknown_topology() -> None:
    """A topology that cannot be read is a one-line error, not a traceback."""
    result = CliRunner().invoke(cli, ["slurm-gres", "--topology", "example:nope"])
    assert result.exit_code == 1
    assert "no bundled example topology" in result.output
