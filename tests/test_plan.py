"""plan: the GPUs a policy would pick on a topology file, and why, without a daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuallocd.cli import cli
from gpuallocd.errors import UnknownGpu
from gpuallocd.planning import make_plan, parse_gpu_list
from gpuallocd.policies import get_policy
from gpuallocd.topology import render_smi_topo
from tests.test_policy_support import node


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_plan_explains_the_score_and_links() -> None:
    """A DGX-1 (Volta) pair plan names the NV2 pair and its score tiers."""
    plan = make_plan(node("dgx1-volta"), get_policy("best-effort"), 2)
    assert plan.gpus == (0, 3)
    assert (plan.lanes, plan.numa_pairs) == (2, 1)
    assert [(p.gpus, p.link) for p in plan.pairs] == [((0, 3), "NV2")]
    assert plan.exact
    assert "highest topology score" in plan.reason


def test_plan_respects_busy_gpus() -> None:
    """Busy GPUs are never planned."""
    topology = node("dgx1-volta")
    plan = make_plan(topology, get_policy("best-effort"), 2, busy=parse_gpu_list(topology, "0,3"))
    assert plan.busy == (0, 3)
    assert not {0, 3} & set(plan.gpus)


def test_gpu_lists_take_indices_and_uuids() -> None:
    """--busy and --require accept indices and UUIDs, and reject unknown GPUs."""
    topology = node("workstation-4gpu-nvbridge")
    uuid = topology.gpus[2].uuid
    assert parse_gpu_list(topology, f"0, {uuid}") == (topology.gpus[0].uuid, uuid)
    assert parse_gpu_list(topology, "") == ()
    with pytest.raises(UnknownGpu):
        parse_gpu_list(topology, "9")


def test_cli_plan_prints_gpus_score_and_pairs() -> None:
    """`gpuallocctl plan` prints the chosen GPUs, the score and a pair table."""
    code, out = run("plan", "--topology", "example:dgx-a100", "-n", "2", "--busy", "0")
    assert code == 0, out
    assert "GPU 2, 3" in out
    assert "12 NVLink/XGMI lanes" in out
    assert "NV12" in out


@pytest.mark.parametrize("where", ["local", "global"])
def test_cli_plan_json_flag_local_or_global(where: str) -> None:
    """`--json` works after the command (as the issue writes it) and on the group."""
    args = ["plan", "--topology", "example:dgx2", "-n", "4"]
    args = [*args, "--json"] if where == "local" else ["--json", *args]
    code, out = run(*args)
    assert code == 0, out
    data = json.loads(out)
    assert data["gpus"] == [0, 1, 2, 3]
    assert data["tiers"]["lanes"] == 36
    assert len(data["pairs"]) == 6


def test_cli_plan_reads_a_topology_file(tmp_path: Path) -> None:
    """Any topology file the daemon accepts works, here `nvidia-smi topo -m` text."""
    source = node("workstation-4gpu-nvbridge")
    path = tmp_path / "box.txt"
    path.write_text(render_smi_topo(source))
    code, out = run("plan", "--topology", str(path), "-n", "2", "--busy", "1", "--json")
    assert code == 0, out
    assert json.loads(out)["gpus"] == [2, 3]


def test_cli_plan_passes_policy_options() -> None:
    """--option KEY=VALUE reaches the policy (random's seed)."""
    args = ["plan", "--topology", "example:dgx-h100", "-n", "3", "--policy", "random", "--json"]
    outs = {run(*args, "--option", f"seed={s}")[1] for s in range(6)}
    assert len(outs) > 1
    assert run(*args, "--option", "seed=4") == run(*args, "--option", "seed=4")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "9"], "the node has 8"),
        (["-n", "2", "--policy", "nope"], "unknown policy 'nope'"),
        (["-n", "3", "--policy", "static-dgx1"], "not 3"),
        (["-n", "2", "--busy", "42"], "no GPU '42'"),
        (["-n", "8", "--busy", "1"], "8 GPU(s) asked for, 7 available"),
        (["-n", "2", "--option", "bogus=1"], "policy best-effort"),
        (["-n", "2", "--option", "novalue"], "KEY=VALUE"),
    ],
)
def test_cli_plan_errors_are_messages_not_tracebacks(args: list[str], message: str) -> None:
    """Bad input exits non-zero with a one-line error."""
    code, out = run("plan", "--topology", "example:dgx1-volta", *args)
    assert code != 0
    assert message in out
    assert "Traceback" not in out


def test_cli_plan_unreadable_topology() -> None:
    """A missing topology file is an error message."""
    code, out = run("plan", "--topology", "/nonexistent/topo.json", "-n", "1")
    assert code != 0
    assert "cannot read topology file" in out
