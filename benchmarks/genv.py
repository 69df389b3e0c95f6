"""genv's attach+detach of one GPU, measured in the same run for comparison.

genv is not a dependency: it is found as $GENV_PYTHON (a Python that imports genv) or as
the Python of a `genv` command on PATH. It reads `nvidia-smi`, so the probe gets a stand-in
on its PATH that prints the total memory of 8 GPUs, the only thing genv asks it for here.
Its state goes to a directory on the same disk as the daemon's ledger.

How each side makes a change last: genv rewrites its JSON state file in place (opened with
O_TRUNC, written, closed; under a file lock) and never calls fsync, so an attach is safe
from a crash of the process only once written, and from a power loss not at all. The daemon
answers only after its SQLite commit: with `ledger_sync = "full"` that commit is synced to
disk (two fsyncs a pair), with `normal` it is in the write-ahead log in the kernel's cache
(safe from a crash of the daemon, not from a power loss). So the like-for-like comparison
is genv against `normal`; `full` is the price of surviving a power loss as well.
`genv_rows` measures genv, a `full` daemon and a `normal` one in turn, round by round, and
gives both ratios. `python -m benchmarks.genv` prints these rows alone (BENCH_REPEATS,
BENCH_SECONDS, GENV_PYTHON).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from benchmarks.daemon import running_daemon
from benchmarks.load import run_bench

__all__ = ["genv_python", "genv_rows", "measure_genv"]

Row = tuple[str, str, str, str]
_WARMUP_SECONDS = float(os.environ.get("BENCH_WARMUP", "4"))  # as __main__: a reused log

_STAND_IN_SMI = "#!/bin/sh\nfor i in 1 2 3 4 5 6 7 8; do echo 81920; done\n"

_PROBE = """
import json, statistics, sys, time
import genv.sdk

seconds = float(sys.argv[1])
times = []
with genv.sdk.activate():
    genv.sdk.detach()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        genv.sdk.attach(gpus=1)
        genv.sdk.detach()
        times.append(time.perf_counter() - started)
times.sort()
print(json.dumps({"p50_ms": statistics.median(times) * 1e3,
                  "p99_ms": times[int(0.99 * len(times))] * 1e3, "pairs": len(times)}))
"""


def genv_python() -> str | None:
    """A Python that can import genv, or None when genv is not installed."""
    explicit = os.environ.get("GENV_PYTHON")
    if explicit:
        return explicit
    command = shutil.which("genv")
    if command is None:
        return None
    first_line = Path(command).read_text(errors="replace").splitlines()[0]
    return first_line[2:].strip() if first_line.startswith("#!") else None


def measure_genv(python: str, scratch: Path, seconds: float) -> dict[str, float]:
    """p50 and p99 (ms) of genv.sdk attach(gpus=1)+detach in a loop for `seconds`."""
    bin_dir = scratch / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(_STAND_IN_SMI)
    smi.chmod(0o755)
    state = scratch / "genv-state"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir()
    environ = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "GENV_TMPDIR": str(state),
    }
    environ.pop("GENV_ENVIRONMENT_ID", None)
    done = subprocess.run(
        [python, "-c", _PROBE, str(seconds)],
        env=environ,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _row(what: str, values: list[float], unit: str, note: str, digits: int) -> Row:
    spread = f"{min(values):.{digits}f}-{max(values):.{digits}f}" if len(values) > 1 else ""
    return (what, f"{statistics.median(values):.{digits}f} {unit}".rstrip(), spread, note)


def genv_rows(
    root: Path, full_socket: Path, repeats: int, seconds: float
) -> tuple[list[Row], float | None]:
    """genv, the daemon on `full_socket` (`ledger_sync = "full"`) and a `normal` daemon of
    its own under `root`, in turn, `repeats` rounds of `seconds` each: each ratio is taken
    within its round, so both sides see the machine in the same state. The rows, and genv's
    median p50 (ms; None when genv is not installed)."""
    python = genv_python()
    if python is None:
        return [("genv attach+detach p50", "not installed", "", "set GENV_PYTHON to compare")], None
    (root / "genv-normal").mkdir(parents=True, exist_ok=True)
    with running_daemon(root / "genv-normal", sync="normal") as normal:
        run_bench(str(normal.socket), clients=1, seconds=_WARMUP_SECONDS, raw=True)
        found: dict[str, list[float]] = {"genv": [], "full": [], "normal": []}
        for _ in range(repeats):
            found["full"].append(run_bench(str(full_socket), clients=1, seconds=seconds).p50_ms)
            found["normal"].append(run_bench(str(normal.socket), clients=1, seconds=seconds).p50_ms)
            found["genv"].append(measure_genv(python, root, seconds)["p50_ms"])
    per_round = {
        sync: [ours / genv for ours, genv in zip(found[sync], found["genv"], strict=True)]
        for sync in ("full", "normal")
    }
    rows = [
        _row("genv attach+detach p50 (no fsync)", found["genv"], "ms", "", 3),
        _row("allocate(1)+free p50, ledger_sync normal", found["normal"], "ms", "", 3),
        _row(
            "gpulease p50 / genv p50, like for like (normal: neither syncs)",
            per_round["normal"],
            "",
            "goal <= 1; round by round",
            2,
        ),
        _row(
            "gpulease p50 / genv p50, ledger_sync full (2 fsyncs a pair)",
            per_round["full"],
            "",
            "round by round; genv syncs nothing",
            2,
        ),
    ]
    return rows, statistics.median(found["genv"])


def main() -> None:
    repeats = int(os.environ.get("BENCH_REPEATS", "3"))
    seconds = float(os.environ.get("BENCH_SECONDS", "3"))
    with tempfile.TemporaryDirectory(prefix="gpuallocd-bench-genv-") as tmp:
        root = Path(tmp)
        (root / "full").mkdir()
        with running_daemon(root / "full") as full:
            run_bench(str(full.socket), clients=1, seconds=_WARMUP_SECONDS, raw=True)
            rows, _ = genv_rows(root, full.socket, repeats, seconds)
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
