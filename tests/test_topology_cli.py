"""`gpuallocctl topology --from FILE`: pasted text converted to the JSON document or printed."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from gpuallocd.cli import cli
from gpuallocd.topology import load_topology, parse_smi_topo, topology_from_json

CORPUS = Path(__file__).parent / "topologies"
EXAMPLES = Path(__file__).parents[1] / "gpuallocd" / "examples"


def ctl(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def test_from_file_json_is_the_document_that_replays(tmp_path: Path) -> None:
    """--from a pasted nvidia-smi matrix with --json prints JSON that loads as the same node."""
    source = CORPUS / "nv-4x-v100-power9-traverse.txt"
    result = ctl("topology", "--from", str(source), "--json")
    assert result.exit_code == 0, result.output
    path = tmp_path / "node.json"
    path.write_text(result.output)
    again = load_topology(path)
    original = load_topology(source)
    assert again.gpus == original.gpus
    assert dict(again.links) == dict(original.links)
    assert json.loads(result.output)["format"] == "gpuallocd-topology/1"


def test_from_amd_text_prints_the_matrix() -> None:
    """--from amd-smi text prints a `topo -m` matrix of its GPUs."""
    result = ctl("topology", "--from", str(CORPUS / "amd-smi-2x-rx7900xtx-legacy-rocm-6074.txt"))
    assert result.exit_code == 0, result.output
    printed = parse_smi_topo(result.output)
    assert len(printed.gpus) == 2


def test_from_an_unreadable_file_is_one_line_naming_the_line(tmp_path: Path) -> None:
    """Text that is no matrix exits 2 (a bad file on the command line, docs/cli.md) with
    the reader's message, no traceback."""
    path = tmp_path / "paste.txt"
    path.write_text("\tGPU0\tGPU1\nGPU0\t X \tWARP\nGPU1\tWARP\t X\n")
    result = ctl("topology", "--from", str(path))
    assert result.exit_code == 2
    assert "line 2: unknown link kind 'WARP'" in result.output
    assert "Traceback" not in result.output


def test_from_cannot_be_combined_with_another_source() -> None:
    """--from with --local or --inventory is a usage error."""
    result = ctl("topology", "--from", "x.txt", "--inventory", "example:dgx1-volta")
    assert result.exit_code == 2
    assert "only one of" in result.output


def test_from_json_file_prints_the_same_document() -> None:
    """A JSON topology passes through --from --json unchanged in meaning."""
    result = ctl("topology", "--from", str(EXAMPLES / "dgx-a100.json"), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert len(topology_from_json(document).gpus) == 8
