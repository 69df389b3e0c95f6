"""simulate: replay a trace of allocations and frees, with a summary, offline."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuallocd.cli import cli
from gpuallocd.planning import TraceError, read_trace, simulate
from gpuallocd.policies import get_policy
from tests.test_policy_support import node

TRACE: list[dict[str, Any]] = [
    {"op": "allocate", "id": "j1", "count": 2},
    {"op": "allocate", "id": "j2", "gpus": [0, 3]},
    {"op": "allocate", "id": "j3", "gpus": [5], "count": 2},
    {"op": "free", "id": "j1"},
    {"op": "allocate", "id": "j2", "gpus": [0, 3]},
    {"op": "free", "id": "zz"},
    {"op": "allocate", "id": "j4", "count": 8},
    {"op": "allocate", "id": "j3", "count": 1},
]


def lines(ops: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(op) for op in ops]


def test_steps_follow_the_trace_in_order() -> None:
    """One step per line: granted GPUs by index, or null and the error."""
    result = simulate(node("dgx1-volta"), get_policy("best-effort"), read_trace(lines(TRACE)))
    got = [(s.op, s.id, s.gpus, s.error is None) for s in result.steps]
    assert got == [
        ("allocate", "j1", (0, 3), True),
        ("allocate", "j2", None, False),
        ("allocate", "j3", (5, 6), True),
        ("free", "j1", (0, 3), True),
        ("allocate", "j2", (0, 3), True),
        ("free", "zz", None, False),
        ("allocate", "j4", None, False),
        ("allocate", "j3", None, False),
    ]
    assert "leased" in (result.steps[1].error or "")
    assert "active already" in (result.steps[7].error or "")


def test_summary_counts_grants_refusals_and_scores() -> None:
    """The summary counts every outcome and averages the granted sets' scores."""
    result = simulate(node("dgx1-volta"), get_policy("best-effort"), read_trace(lines(TRACE)))
    summary = result.summary
    assert (summary.grants, summary.refusals, summary.frees, summary.free_errors) == (3, 3, 1, 1)
    assert summary.mean_score == sum(s.score or 0 for s in result.steps if s.op == "allocate") / 3
    assert summary.active_leases == 2
    assert 0.0 <= summary.fragmentation <= summary.fragmentation_max <= 1.0


def test_fragmentation_is_zero_when_the_free_gpus_are_the_best_set() -> None:
    """Taking one socket of a DGX-1 leaves a perfect quad: no fragmentation."""
    ops: list[dict[str, Any]] = [{"op": "allocate", "id": "a", "gpus": [4, 5, 6, 7]}]
    result = simulate(node("dgx1-volta"), get_policy("simple"), read_trace(lines(ops)))
    assert result.summary.fragmentation_final == 0.0


def test_fragmentation_rises_when_pairs_are_broken() -> None:
    """Leasing one GPU of each NV4 bridge leaves two unlinked GPUs: fully fragmented."""
    ops: list[dict[str, Any]] = [{"op": "allocate", "id": "a", "gpus": [0, 2]}]
    topology = node("workstation-4gpu-nvbridge")
    result = simulate(topology, get_policy("simple"), read_trace(lines(ops)))
    assert result.summary.fragmentation_final > 0.99


def test_best_effort_fragments_less_than_simple_on_singles() -> None:
    """Single-GPU jobs on a workstation: best-effort keeps a bridge whole, simple does not."""
    ops: list[dict[str, Any]] = [
        {"op": "allocate", "id": "a", "count": 2},
        {"op": "allocate", "id": "b", "count": 1},
        {"op": "free", "id": "a"},
        {"op": "allocate", "id": "c", "count": 1},
    ]
    topology = node("workstation-4gpu-nvbridge")
    best = simulate(topology, get_policy("best-effort"), read_trace(lines(ops))).summary
    simple = simulate(topology, get_policy("simple"), read_trace(lines(ops))).summary
    assert best.fragmentation_final == 0.0
    assert simple.fragmentation_final > 0.99
    assert best.fragmentation < simple.fragmentation


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ("[1]", "JSON object"),
        ('{"op": "allocate", "id": ""}', "'id'"),
        ('{"op": "allocate", "id": "a"}', "give a count, or the GPUs"),
        ('{"op": "allocate", "id": "a", "count": 0}', "at least 1"),
        ('{"op": "allocate", "id": "a", "count": true}', "at least 1"),
        ('{"op": "allocate", "id": "a", "gpus": []}', "non-empty list"),
        (
            '{"op": "allocate", "id": "a", "gpus": [1, 2], "count": 1}',
            r"less than the 2 GPU\(s\) named",
        ),
        ('{"op": "steal", "id": "a"}', "'allocate' or 'free'"),
    ],
)
def test_bad_trace_lines_name_the_line(text: str, message: str) -> None:
    """A malformed line stops the replay with its line number."""
    with pytest.raises(TraceError, match=f"trace line 2: .*{message}"):
        list(read_trace(["", text]))


def test_cli_simulate_json_has_steps_and_summary(tmp_path: Path) -> None:
    """`simulate --json` prints {"steps": [...], "summary": {...}}, one step per line."""
    trace = tmp_path / "day.jsonl"
    trace.write_text("\n".join(lines(TRACE)) + "\n")
    args = ["simulate", "--topology", "example:dgx1-volta", "--trace", str(trace), "--json"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert len(data["steps"]) == len(TRACE)
    assert set(data["steps"][0]) >= {"op", "id", "gpus", "error"}
    assert data["steps"][1]["gpus"] is None
    assert data["summary"]["grants"] == 3
    assert {"refusals", "mean_score", "fragmentation"} <= set(data["summary"])


def test_cli_simulate_prints_a_summary_for_people(tmp_path: Path) -> None:
    """Without --json the summary is a short list of figures."""
    trace = tmp_path / "day.jsonl"
    trace.write_text("\n".join(lines(TRACE)))
    args = ["simulate", "--topology", "example:dgx1-volta", "--trace", str(trace)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "grants" in result.output
    assert "fragmentation (mean)" in result.output


def test_cli_simulate_bad_trace_is_an_error_message() -> None:
    """A bad line is reported with its number, no traceback."""
    args = ["simulate", "--topology", "example:dgx1-volta", "--trace", "-"]
    result = CliRunner().invoke(cli, args, input='{"op": "allocate", "id": "a"}\n')
    assert result.exit_code != 0
    assert "trace line 1" in result.output
    assert "Traceback" not in result.output


def test_a_long_trace_replays_quickly() -> None:
    """20,000 lines on a DGX-1 replay in well under the time a day's trace may take."""
    rng = random.Random(3)
    ops: list[str] = []
    active: list[str] = []
    for i in range(20_000):
        if active and rng.random() < 0.5:
            ops.append(json.dumps({"op": "free", "id": active.pop(rng.randrange(len(active)))}))
        else:
            ops.append(
                json.dumps({"op": "allocate", "id": f"j{i}", "count": rng.choice((1, 2, 4))})
            )
            active.append(f"j{i}")
    # The replay's own CPU time, not the wall clock: on a loaded machine (CI's two cores, the
    # suite's other workers) the wall clock measures the neighbours.
    start = time.process_time()
    result = simulate(node("dgx1-volta"), get_policy("best-effort"), read_trace(ops))
    assert time.process_time() - start < 15
    assert result.summary.steps == 20_000
