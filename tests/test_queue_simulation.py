"""`simulate` of a timed trace: the same jobs under fifo and fair-share, side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuallocd.cli.app import cli
from gpuallocd.errors import TraceError
from gpuallocd.planning.queue_sim import Job, read_jobs, simulate_orders
from gpuallocd.policies import get_policy
from gpuallocd.topology import load_topology

HOUR = 3600.0
DAY_TRACE = Path(__file__).resolve().parent.parent / "docs" / "traces" / "scheduling-day.jsonl"


def _heavy_then_light() -> list[Job]:
    heavy = [Job(f"h{i}", "heavy", float(i), HOUR, 1) for i in range(50)]
    return [*heavy, Job("l1", "light", 100.0, HOUR, 1)]


def test_the_light_job_waits_less_under_fair_share() -> None:
    """Fifty 1-GPU jobs of one user, then one of another on 4 GPUs: under fifo the light job
    waits for most of the fifty; under fair-share it goes at the first GPU that frees."""
    topology = load_topology("example:workstation-4gpu-nvbridge")
    fifo, fair = simulate_orders(topology, get_policy("simple"), _heavy_then_light())
    light_fifo = next(u for u in fifo.users if u.user == "light")
    light_fair = next(u for u in fair.users if u.user == "light")
    assert light_fifo.max_wait > 10 * HOUR
    assert light_fair.max_wait < HOUR
    assert all(u.served == u.jobs for u in (*fifo.users, *fair.users))
    assert fifo.utilisation == pytest.approx(51 / 52, rel=1e-3)  # one GPU idle in the last hour


def test_a_blocked_large_job_is_not_starved_by_small_ones() -> None:
    """A 4-GPU job behind small ones holds the GPUs it waits for from those behind it, under
    either order: it starts once the GPUs held at its arrival are done."""
    topology = load_topology("example:workstation-4gpu-nvbridge")
    jobs = [Job(f"s{i}", "small", 0.0, HOUR, 1) for i in range(3)]
    jobs += [Job("big", "big", 10.0, HOUR, 4)]
    jobs += [Job(f"t{i}", "small2", 20.0 + i, HOUR, 1) for i in range(8)]
    for result in simulate_orders(topology, get_policy("simple"), jobs):
        big = next(u for u in result.users if u.user == "big")
        assert big.max_wait == pytest.approx(HOUR - 10.0)


def test_cli_shows_both_orders_for_a_day(tmp_path: Path) -> None:
    """The day in docs/traces runs under both orders: a table for people, JSON for tools."""
    args = ["simulate", "--topology", "example:dgx1-volta", "--trace", str(DAY_TRACE)]
    shown = CliRunner().invoke(cli, args)
    assert shown.exit_code == 0, shown.output
    assert "FIFO P95" in shown.output and "FAIR P95" in shown.output
    assert "GPU utilisation" in shown.output
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).output)
    assert [o["order"] for o in data["orders"]] == ["fifo", "fair-share"]
    fifo, fair = ({u["user"]: u for u in o["users"]} for o in data["orders"])
    assert fair["ana"]["p95_wait_seconds"] < fifo["ana"]["p95_wait_seconds"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"op": "submit", "id": "a", "user": "u", "at": -1, "duration": 5}', "'at'"),
        ('{"op": "submit", "id": "a", "user": "u", "at": 0, "duration": 0}', "'duration'"),
        ('{"op": "submit", "id": "a", "at": 0, "duration": 5}', "'user'"),
        ('{"op": "allocate", "id": "a", "count": 1}', "only 'submit'"),
    ],
)
def test_bad_timed_trace_lines_name_the_line(text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        read_jobs([text])
