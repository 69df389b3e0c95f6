"""The benchmark rows of `run`'s start and of genv (benchmarks/startup.py, genv.py): their
shape, not their times."""

from __future__ import annotations

import os
from pathlib import Path

from benchmarks.genv import genv_rows
from benchmarks.startup import cli_rows
from tests.harness import ThreadDaemon


def test_run_and_a_bare_interpreter_are_timed_in_turn(daemon: ThreadDaemon) -> None:
    """Four rows: the two starts, and `run` over the interpreter by wall and by CPU time;
    every run leased and freed (none is left)."""
    rows = cli_rows(daemon.paths.socket, repeats=1, runs=2)
    assert [row[0] for row in rows] == [
        "python -c pass",
        "gpuallocctl run -n 1 -- true",
        "run / python -c pass, round by round",
        "the same in CPU time (user + system)",
    ]
    assert all(float(row[1].split()[0]) > 0 for row in rows)
    assert rows[2][3] == "goal <= 4"
    with daemon.client() as client:
        assert client.leases() == []


def test_without_genv_the_comparison_says_how_to_get_it(
    daemon: ThreadDaemon, short_dir: Path
) -> None:
    """No genv on PATH and no GENV_PYTHON: one row that says so, and no median."""
    os.environ.pop("GENV_PYTHON", None)
    os.environ["PATH"] = str(short_dir)
    rows, median = genv_rows(short_dir, daemon.paths.socket, repeats=1, seconds=0.1)
    assert median is None
    assert rows == [("genv attach+detach p50", "not installed", "", "set GENV_PYTHON to compare")]
