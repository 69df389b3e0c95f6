"""How long a command takes from exec to exit: `gpuallocctl run -n 1 -- true` against a bare
`python -c pass` of the same environment."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["median_wall_ms"]


def median_wall_ms(argv: list[str], runs: int, environ: dict[str, str] | None = None) -> float:
    """Median wall time in ms of `runs` runs of `argv` (after one warm-up run)."""
    times = []
    for i in range(runs + 1):
        started = time.perf_counter()
        subprocess.run(
            argv, env=environ, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        if i:
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def python_pass_ms(runs: int) -> float:
    return median_wall_ms([sys.executable, "-c", "pass"], runs)


def compile_bytecode() -> None:
    """Write the packages' bytecode, as installing them does: the time measured is a start,
    not a first compile (PYTHONDONTWRITEBYTECODE, or a read-only tree, would otherwise make
    every run compile the ~20 modules `run` imports: 15-30 ms here)."""
    import compileall

    import gpulease

    import gpuallocd

    for package in (gpuallocd, gpulease):
        compileall.compile_dir(package.__path__[0], quiet=1)


def cli_run_ms(socket: Path, runs: int) -> float:
    """`run`'s median wall time; call `compile_bytecode` first, once."""
    ctl = str(Path(sys.executable).with_name("gpuallocctl"))
    environ = {**os.environ, "GPUALLOCD_SOCKET": str(socket)}
    return median_wall_ms([ctl, "run", "-n", "1", "--", "true"], runs, environ)
