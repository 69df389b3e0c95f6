"""`python -m benchmarks.bench`: the bare socket client and the floor measured in the same run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import ThreadDaemon


def bench_process(daemon: ThreadDaemon, *args: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "benchmarks.bench", "--socket", str(daemon.paths.socket), *args]
    root = Path(__file__).resolve().parent.parent
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root
    )


@pytest.mark.parametrize("raw", [False, True])
def test_bench_drives_the_daemon_through_either_client(daemon: ThreadDaemon, raw: bool) -> None:
    """gpulease or the bare HTTP client: pairs are granted and freed, none refused or failed,
    and no lease is left behind."""
    args = ["--clients", "2", "--seconds", "0.3", "--json", *(["--raw"] if raw else [])]
    out, err = bench_process(daemon, *args).communicate(timeout=60)
    result = json.loads(out)
    assert result["pairs"] > 0 and result["errors"] == 0 and result["refused"] == 0, err
    assert "floor" not in result
    with daemon.client() as client:
        assert client.leases() == []


def test_bench_floor_measures_the_socket_and_a_durable_commit(
    daemon: ThreadDaemon, short_dir: Path
) -> None:
    """--floor adds a round trip, a commit in the given directory, and their pair total;
    the scratch database is removed afterwards."""
    state = short_dir / "disk"
    state.mkdir()
    args = ["--raw", "--seconds", "0.2", "--floor", "--state-dir", str(state), "--json"]
    out, err = bench_process(daemon, *args).communicate(timeout=120)
    floor = json.loads(out)["floor"]
    assert floor["round_trip_us"] > 0 and floor["commit_us"] > 0, err
    assert floor["pair_ms"] == pytest.approx(
        2 * (floor["round_trip_us"] + floor["commit_us"]) / 1000, rel=1e-3
    )
    assert floor["directory"] == str(state) and list(state.iterdir()) == []


def test_bench_floor_in_text_gives_the_ratio(daemon: ThreadDaemon, short_dir: Path) -> None:
    """The text output names the floor and the daemon's multiple of it."""
    args = ["--raw", "--seconds", "0.2", "--floor", "--state-dir", str(short_dir)]
    out, err = bench_process(daemon, *args).communicate(timeout=120)
    assert "floor: socket round trip p50" in out and "x the floor" in out, err


def test_bench_on_the_readme_example_counts_refusals_on_their_own_line(
    daemon: ThreadDaemon,
) -> None:
    """README's `bench --clients 8` on the 4-GPU example: it says first that 8 clients of
    1 GPU cannot all hold one at once and how many can; refusals are a line of their own
    (how many, how fast), never counted with the pairs; 4 clients are never refused."""
    out, err = bench_process(daemon, "--clients", "8", "--seconds", "0.5").communicate(timeout=120)
    assert "8 client(s) x 1 GPU(s) > 4 free GPU(s)" in err and "--clients 4" in err
    pairs_line, refused_line = out.splitlines()[0], out.splitlines()[-1]
    assert "refused" not in pairs_line
    assert refused_line.startswith("refused: ") and "answered in p50" in refused_line
    out, err = bench_process(daemon, "--clients", "4", "--seconds", "0.5").communicate(timeout=120)
    assert "free GPU(s)" not in err and out.splitlines()[-1] == "refused: none"
