"""policy-bench: times a policy for every request size, and says whether each was exact."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpuallocd.cli import cli
from gpuallocd.planning.bench import bench_policy, random_topology
from gpuallocd.policies import get_policy
from tests.test_policy_support import node


def test_bench_covers_every_size_idle_and_half_busy() -> None:
    """An 8-GPU node gives 8 idle rows and 4 half-busy rows, all exact."""
    rows = bench_policy(node("dgx1-volta"), lambda: get_policy("best-effort"), repeat=1)
    assert [(r.state, r.count) for r in rows] == [("idle", n) for n in range(1, 9)] + [
        ("half busy", n) for n in range(1, 5)
    ]
    assert all(r.exact and r.median_ms >= 0 for r in rows)


def test_random_topology_is_seeded() -> None:
    """The same size and seed give the same links; another seed gives others."""
    assert random_topology(6, 1).links == random_topology(6, 1).links
    assert random_topology(6, 1).links != random_topology(6, 2).links


def test_cli_policy_bench_json() -> None:
    """`policy-bench --json` lists one row per topology, state and size."""
    args = ["policy-bench", "--topology", "example:workstation-4gpu-nvbridge", "--repeat", "1"]
    result = CliRunner().invoke(cli, [*args, "--random-topology", "5", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["rows"]
    assert {r["topology"] for r in rows} == {"workstation-4gpu-nvbridge", "random-5gpu-seed0"}
    assert all(r["exact"] for r in rows)


def test_refused_sizes_are_rows_with_the_reason() -> None:
    """static-dgx1 cannot serve 3 GPUs: that row carries the refusal, not a crash."""
    rows = bench_policy(node("dgx1-volta"), lambda: get_policy("static-dgx1"), repeat=1)
    refused = {r.count: r.error for r in rows if r.state == "idle" and r.error}
    assert sorted(refused) == [3, 5, 6, 7]
    assert "not 3" in (refused[3] or "")
