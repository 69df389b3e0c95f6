"""How long a command takes from exec to exit: `gpuallocctl run -n 1 -- true` against a bare
`python -c pass` of the same environment.

`cli_rows` runs the two in turn, one after the other, and gives the ratio of their medians
round by round (the goal: `run` at most 4x a bare interpreter), by wall time and by CPU time
(user + system of the process: on a shared machine the steadier of the two, though it leaves
out the waits for the daemon). `python -m benchmarks.startup` prints these rows alone, with a
daemon of its own (BENCH_REPEATS).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["cli_rows", "compile_bytecode"]

Row = tuple[str, str, str, str]
CLI_RUNS = 20  # of each command, per round


def compile_bytecode() -> None:
    """Write the packages' bytecode, as installing them does: the time measured is a start,
    not a first compile (PYTHONDONTWRITEBYTECODE, or a read-only tree, would otherwise make
    every run compile the ~20 modules `run` imports: 15-30 ms here)."""
    import compileall

    import gpulease

    import gpuallocd

    for package in (gpuallocd, gpulease):
        compileall.compile_dir(package.__path__[0], quiet=1)


def _timed(argv: Sequence[str], environ: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) time in ms of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        argv, env=environ, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall * 1e3, cpu * 1e3


def _round(commands: dict[str, list[str]], environ: dict[str, str], runs: int) -> dict[str, Any]:
    """Each command `runs` times, alternating (after one warm-up run each): the median wall
    and CPU time of each."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for n in range(runs + 1):
        for name, argv in commands.items():
            taken = _timed(argv, environ)
            if n:
                times[name].append(taken)
    return {
        name: (statistics.median(t[0] for t in taken), statistics.median(t[1] for t in taken))
        for name, taken in times.items()
    }


def cli_rows(socket: Path, repeats: int, runs: int = CLI_RUNS) -> list[Row]:
    """A bare interpreter and `run` in turn, round by round; the ratios within each round."""
    compile_bytecode()
    ctl = str(Path(sys.executable).with_name("gpuallocctl"))
    commands = {
        "bare": [sys.executable, "-c", "pass"],
        "run": [ctl, "run", "-n", "1", "--", "true"],
    }
    environ = {**os.environ, "GPUALLOCD_SOCKET": str(socket)}
    rounds = [_round(commands, environ, runs) for _ in range(repeats)]
    bare = [r["bare"][0] for r in rounds]
    run = [r["run"][0] for r in rounds]
    wall = [r["run"][0] / r["bare"][0] for r in rounds]
    cpu = [r["run"][1] / r["bare"][1] for r in rounds]
    return [
        _row("python -c pass", bare, "ms", "", 1),
        _row("gpuallocctl run -n 1 -- true", run, "ms", "", 1),
        _row("run / python -c pass, round by round", wall, "", "goal <= 4", 2),
        _row(
            "the same in CPU time (user + system)", cpu, "", "the waits for the daemon left out", 2
        ),
    ]


def _row(what: str, values: list[float], unit: str, note: str, digits: int) -> Row:
    spread = f"{min(values):.{digits}f}-{max(values):.{digits}f}" if len(values) > 1 else ""
    return (what, f"{statistics.median(values):.{digits}f} {unit}".rstrip(), spread, note)


def main() -> None:
    from benchmarks.daemon import running_daemon

    repeats = int(os.environ.get("BENCH_REPEATS", "3"))
    with (
        tempfile.TemporaryDirectory(prefix="gpuallocd-bench-startup-") as tmp,
        running_daemon(Path(tmp)) as daemon,
    ):
        rows = cli_rows(daemon.socket, repeats)
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
