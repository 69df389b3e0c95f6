"""What tying processes to a lease costs a grant: allocate+free pairs by callers with 0 and
BENCH_CHILDREN (default 5,000) children, detached and bound, in each tracking mode this host
offers (`scope` where systemd is PID 1 with cgroup v2, `connector` where the kernel grants
its process events, `proc-scan` everywhere).

Two caller processes, one with no child and one with many idle children of its own (a
launcher, a notebook server), take turns round by round (BENCH_REPEATS rounds of
BENCH_MEMBERSHIP_PAIRS pairs each), so both see the machine in the same state; the rows give
p50 and p99 over all rounds, and the ratio of the many-children caller's p50 to the other's.
A detached lease must cost the same whatever its caller's family; a bound one pays for its
own family (the walk, the move into its scope), never for anyone else's processes. The
bound pairs of a caller with no child, mode beside mode, are the grant latency the choice of
`auto` is made from (docs/architecture.md).

`python -m benchmarks.membership` prints the rows alone; BENCH_MODES (comma-separated)
picks the modes.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from gpulease import DaemonUnavailable

from benchmarks.daemon import running_daemon

__all__ = ["membership_rows"]

CHILDREN = int(os.environ.get("BENCH_CHILDREN", "5000"))
PAIRS = int(os.environ.get("BENCH_MEMBERSHIP_PAIRS", "100"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
MODES = tuple(os.environ.get("BENCH_MODES", "scope,connector,proc-scan").split(","))

Row = tuple[str, str, str, str]

# A caller: `CHILDREN` idle children of its own, then on each line `KIND PAIRS` that many
# allocate(1)+free pairs (KIND: detached or bound), answering with their times in ms.
CALLER = """
import json, os, signal, sys, time
from gpulease import Client
children = [
    os.posix_spawn("/bin/sleep", ["sleep", "3600"], {}) for _ in range(int(sys.argv[2]))
]
try:
    with Client(sys.argv[1], timeout=600) as client:
        print("ready", flush=True)
        for line in sys.stdin:
            kind, pairs = line.split()
            took = []
            for _ in range(int(pairs)):
                started = time.perf_counter()
                client.free(client.allocate(1, bind_to_process=kind == "bound").id)
                took.append((time.perf_counter() - started) * 1e3)
            print(json.dumps(took), flush=True)
finally:
    for child in children:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
"""


class Caller:
    """One caller process with `children` children of its own."""

    def __init__(self, socket: Path, children: int) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", CALLER, str(socket), str(children)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self._readline() != "ready":
            raise RuntimeError("the benchmark's caller did not start")

    def pairs(self, kind: str, count: int) -> list[float]:
        assert self._process.stdin is not None
        self._process.stdin.write(f"{kind} {count}\n")
        self._process.stdin.flush()
        took: list[float] = json.loads(self._readline())
        return took

    def close(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        self._process.wait(120)

    def _readline(self) -> str:
        assert self._process.stdout is not None
        return self._process.stdout.readline().strip()


@contextlib.contextmanager
def callers(socket: Path, sizes: tuple[int, ...]) -> Iterator[list[Caller]]:
    started: list[Caller] = []
    try:
        for size in sizes:
            started.append(Caller(socket, size))
        yield started
    finally:
        for caller in started:
            caller.close()


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _measure(socket: Path) -> dict[tuple[str, int], list[float]]:
    """Each kind of pair by each caller, round by round."""
    sizes = (0, CHILDREN)
    found: dict[tuple[str, int], list[float]] = {}
    with callers(socket, sizes) as both:
        for caller in both:
            caller.pairs("detached", 20)  # warm up: connections, caches, the ledger's log
        for _ in range(REPEATS):
            for kind in ("detached", "bound"):
                for size, caller in zip(sizes, both, strict=True):
                    found.setdefault((kind, size), []).extend(caller.pairs(kind, PAIRS))
    return found


def _rows(mode: str, found: dict[tuple[str, int], list[float]]) -> list[Row]:
    rows: list[Row] = []
    for kind in ("detached", "bound"):
        alone = statistics.median(found[(kind, 0)])
        for size in (0, CHILDREN):
            took = found[(kind, size)]
            p50, p99 = statistics.median(took), _quantile(took, 0.99)
            note = f"{len(took)} pairs"
            if size:
                note = f"{p50 / alone:.2f}x the p50 with no child; " + note
            rows.append(
                (
                    f"{kind} allocate(1)+free p50 / p99, caller with {size:,} children, {mode}",
                    f"{p50:.2f} / {p99:.2f} ms",
                    "",
                    note,
                )
            )
    return rows


def membership_rows(modes: tuple[str, ...] = MODES) -> Iterator[Row]:
    """The rows of each mode, as soon as it is measured; a mode this host lacks says so."""
    with tempfile.TemporaryDirectory(prefix="gpuallocd-membership-") as tmp:
        for mode in modes:
            root = Path(tmp) / mode
            root.mkdir()
            settings = {"GPUALLOCD_PROCESS_TRACKING": mode}
            try:
                with running_daemon(root, environment=settings) as daemon:
                    found = _measure(daemon.socket)
            except DaemonUnavailable:
                yield (f"grant cost, {mode}", "unavailable", "", "the daemon refused the mode")
                continue
            yield from _rows(mode, found)


if __name__ == "__main__":
    for row in membership_rows():
        print("| " + " | ".join(row) + " |", flush=True)
