"""The soak row: allocate/free pairs against one daemon for a long time, and what it held at
the start and at the end: resident memory, open file descriptors, the ledger's size (file
and write-ahead log) and the pair latency's p99.

BENCH_SOAK_SECONDS (default 60, at most 3600; 0 skips the row) bounds the time and
BENCH_SOAK_PAIRS (default and at most 1,000,000) the pairs, whichever ends first.
BENCH_SOAK_CLIENTS (default 4) gpulease clients drive it, in segments of BENCH_SOAK_SEGMENT
seconds (default 5): the first segment's figures are the start, the last one's the end.
Run it alone with `python -m benchmarks.soak`.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.daemon import RunningDaemon, running_daemon
from benchmarks.load import BenchResult, run_bench

__all__ = ["soak_rows"]

MAX_SECONDS = 3600.0
MAX_PAIRS = 1_000_000
Row = tuple[str, str, str, str]


def _setting(name: str, default: float, maximum: float) -> float:
    return max(0.0, min(float(os.environ.get(name, default)), maximum))


@dataclass(frozen=True)
class Snapshot:
    rss_kib: int
    fds: int
    ledger_bytes: int
    wal_bytes: int
    p99_ms: float


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _snapshot(daemon: RunningDaemon, state: Path, segment: BenchResult) -> Snapshot:
    fds = len(os.listdir(f"/proc/{daemon.pid}/fd"))
    ledger = state / "ledger.sqlite3"
    wal = _size(ledger.with_name("ledger.sqlite3-wal"))
    return Snapshot(_rss_kib(daemon.pid), fds, _size(ledger), wal, segment.p99_ms)


def soak(root: Path) -> tuple[Snapshot, Snapshot, int, float]:
    """Run the soak on a new daemon under `root`: start, end, pairs, seconds."""
    seconds = _setting("BENCH_SOAK_SECONDS", 60.0, MAX_SECONDS)
    pairs_cap = int(_setting("BENCH_SOAK_PAIRS", MAX_PAIRS, MAX_PAIRS))
    clients = int(os.environ.get("BENCH_SOAK_CLIENTS", "4"))
    segment = min(float(os.environ.get("BENCH_SOAK_SEGMENT", "5")), seconds)
    state = root / "state"
    with running_daemon(root) as daemon:
        began = time.monotonic()
        result = run_bench(str(daemon.socket), clients=clients, seconds=segment)
        first = _snapshot(daemon, state, result)
        pairs = result.pairs
        while (left := seconds - (time.monotonic() - began)) >= 1.0 and pairs < pairs_cap:
            result = run_bench(str(daemon.socket), clients=clients, seconds=min(segment, left))
            pairs += result.pairs
        last = _snapshot(daemon, state, result)
        return first, last, pairs, time.monotonic() - began


def soak_rows(root: Path) -> list[Row]:
    """The soak's rows for the `make bench` table (none with BENCH_SOAK_SECONDS=0)."""
    if _setting("BENCH_SOAK_SECONDS", 60.0, MAX_SECONDS) == 0:
        return []
    first, last, pairs, took = soak(root)

    def change(what: str, start: float, end: float, unit: str, digits: int = 0) -> Row:
        shown = f"{start:.{digits}f} -> {end:.{digits}f} {unit}"
        return (f"soak: {what}, start -> end", shown, "", "")

    return [
        ("soak: allocate+free pairs", f"{pairs} in {took:.0f} s", "", f"{pairs / took:.0f}/s"),
        change("daemon RSS", first.rss_kib / 1024, last.rss_kib / 1024, "MiB", 1),
        change("daemon open fds", first.fds, last.fds, ""),
        change("ledger file", first.ledger_bytes / 2**20, last.ledger_bytes / 2**20, "MiB", 1),
        change("write-ahead log", first.wal_bytes / 2**20, last.wal_bytes / 2**20, "MiB", 1),
        change("pair p99", first.p99_ms, last.p99_ms, "ms", 3),
    ]


def main() -> None:
    with tempfile.TemporaryDirectory(
        prefix="gpuallocd-soak-", dir=os.environ.get("BENCH_DIR")
    ) as tmp:
        rows = soak_rows(Path(tmp))
    print("| what | value | spread | note |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
