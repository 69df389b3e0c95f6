"""Run every benchmark against a fresh daemon (`ledger_sync = "full"`) and print one table.

Each daemon measurement is repeated (BENCH_REPEATS, default 3) and shown as the median of
the runs with their spread (min-max): on a shared machine one run proves little.
BENCH_SECONDS (default 3) is the length of each load run; the process-tracking rows take their
own knobs (benchmarks/process_tracking.py). Before measuring, the daemon
serves BENCH_WARMUP seconds (default 4) of pairs: a started daemon's first thousand or so
commits append to a new write-ahead log, about twice the cost of the steady state, where
the log is reused from its start after each checkpoint; a service runs for weeks.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.daemon import INVENTORY, RunningDaemon, running_daemon
from benchmarks.dashboard import dashboard_rows
from benchmarks.energy import energy_rows
from benchmarks.floor import measure_floor
from benchmarks.following import following_rows
from benchmarks.genv import genv_rows
from benchmarks.http_floor import capture_answers, serving_http_floor
from benchmarks.load import BenchResult, run_bench
from benchmarks.membership import membership_rows
from benchmarks.notices import notice_rows
from benchmarks.policies import policy_rows
from benchmarks.preemption import preemption_rows
from benchmarks.preview import preview_rows
from benchmarks.process_tracking import process_tracking_rows
from benchmarks.reads import read_rows
from benchmarks.soak import soak_rows
from benchmarks.startup import cli_rows
from benchmarks.totals import budget_rows, history_rows, ledger_pair_rows
from benchmarks.waiters import waiter_rows

REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
WARMUP_SECONDS = float(os.environ.get("BENCH_WARMUP", "4"))

Row = tuple[str, str, str, str]  # what, median, spread, goal or note


def _repeat(measure: Callable[[], float]) -> list[float]:
    return [measure() for _ in range(REPEATS)]


def _row(what: str, values: list[float], unit: str, note: str = "", digits: int = 2) -> Row:
    spread = f"{min(values):.{digits}f}-{max(values):.{digits}f}" if len(values) > 1 else ""
    return (what, f"{statistics.median(values):.{digits}f} {unit}".rstrip(), spread, note)


def _load(socket: Path, clients: int, raw: bool) -> list[BenchResult]:
    return [
        run_bench(str(socket), clients=clients, seconds=SECONDS, raw=raw) for _ in range(REPEATS)
    ]


def _cpu_per_pair_us(daemon: RunningDaemon) -> float:
    """The daemon's CPU time per pair, one bare socket client: its own cost, whatever the load."""
    before = daemon.cpu_seconds()
    result = run_bench(str(daemon.socket), clients=1, seconds=SECONDS, raw=True)
    return (daemon.cpu_seconds() - before) / max(result.pairs, 1) * 1e6


def _daemon_rows(daemon: RunningDaemon, state_dir: Path) -> tuple[list[Row], dict[str, float]]:
    socket = daemon.socket
    if WARMUP_SECONDS > 0:
        run_bench(str(socket), clients=1, seconds=WARMUP_SECONDS, raw=True)
    rows: list[Row] = []
    floors = [measure_floor(state_dir) for _ in range(REPEATS)]
    pair_floor = statistics.median(f.pair_ms for f in floors)
    rows.append(_row("AF_UNIX round trip", [f.round_trip_us for f in floors], "us", digits=0))
    rows.append(
        _row("durable SQLite commit (WAL, FULL)", [f.commit_us for f in floors], "us", digits=0)
    )
    rows.append(
        _row(
            "floor of a pair (2 round trips + 2 commits)",
            [f.pair_ms for f in floors],
            "ms",
            digits=3,
        )
    )
    found: dict[str, float] = {"commit_ms": statistics.median(f.commit_us for f in floors) / 1e3}
    for label, raw in (("gpulease", False), ("raw socket", True)):
        runs = _load(socket, 1, raw)
        p50 = [r.p50_ms for r in runs]
        found[label] = statistics.median(p50)
        ratio = f"{found[label] / pair_floor:.1f}x the floor"
        rows.append(_row(f"allocate(1)+free p50, {label}", p50, "ms", ratio, 3))
        rows.append(
            _row(
                f"allocate(1)+free p99, {label}", [r.p99_ms for r in runs], "ms", "goal <= 3 ms", 3
            )
        )
    cpu = _repeat(lambda: _cpu_per_pair_us(daemon))
    rows.append(_row("daemon CPU per pair (bare socket client)", cpu, "us", "user + system", 0))
    for clients in (1, 8, 32):
        runs = _load(socket, clients, False)
        note = "goal >= 1500/s" if clients == 32 else ""
        rows.append(
            _row(
                f"pairs/s, {clients} clients, gpulease",
                [r.pairs_per_second for r in runs],
                "/s",
                note,
                0,
            )
        )
    runs = _load(socket, 32, True)
    rows.append(
        _row("pairs/s, 32 clients, raw socket", [r.pairs_per_second for r in runs], "/s", "", 0)
    )
    return rows, found


def _http_floor_rows(root: Path, daemon: RunningDaemon, found: dict[str, float]) -> list[Row]:
    """The same pairs against a minimal aiohttp app (benchmarks/http_floor.py)."""
    with serving_http_floor(root, capture_answers(daemon.socket)) as socket:
        one = _load(socket, 1, False)
        many = _load(socket, 32, False)
    p50 = [r.p50_ms for r in one]
    found["http_floor_ms"] = statistics.median(p50)
    lowest = found["http_floor_ms"] + 2 * found["commit_ms"]
    found["lowest_ms"] = lowest
    return [
        _row("allocate(1)+free p50, gpulease, minimal aiohttp app", p50, "ms", "HTTP floor", 3),
        (
            "HTTP floor + 2 durable commits",
            f"{lowest:.3f} ms",
            "",
            f"the lowest pair over aiohttp; gpulease is {found['gpulease'] / lowest:.1f}x",
        ),
        _row(
            "pairs/s, 32 clients, gpulease, minimal aiohttp app",
            [r.pairs_per_second for r in many],
            "/s",
            "HTTP ceiling: no allocator, no ledger",
            0,
        ),
    ]


def _genv_rows(root: Path, socket: Path, found: dict[str, float]) -> list[Row]:
    """genv, this daemon (`full`) and a `normal` one in turn, round by round (genv.py)."""
    rows, genv_ms = genv_rows(root, socket, REPEATS, SECONDS)
    if genv_ms is not None:
        rows.append(
            (
                "(HTTP floor + 2 commits) / genv p50",
                f"{found['lowest_ms'] / genv_ms:.2f}",
                "",
                "the same ratio for a daemon that only answered and synced",
            )
        )
    return rows


def _policy_rows() -> list[Row]:
    return [
        (f"policy {name}", f"{kept:.0f} us", "", f"fresh instance {fresh:.0f} us")
        for name, kept, fresh in policy_rows()
    ]


def _print(rows: list[Row]) -> None:
    print(
        f"machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}, "
        f"Python {platform.python_version()}"
    )
    print(
        f"daemon: {INVENTORY}, ledger_sync full, default policy; "
        f"{REPEATS} runs of {SECONDS:g} s each: median and spread (min-max)\n"
    )
    print("| what | median | spread | goal / note |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main() -> None:
    with tempfile.TemporaryDirectory(
        prefix="gpuallocd-bench-", dir=os.environ.get("BENCH_DIR")
    ) as tmp:
        root = Path(tmp)
        with running_daemon(root) as daemon:
            rows, found = _daemon_rows(daemon, root / "state")
            rows += _http_floor_rows(root, daemon, found)
            rows += _genv_rows(root, daemon.socket, found)
            rows += cli_rows(daemon.socket, REPEATS)
        rows += read_rows(seconds=SECONDS)
        rows += dashboard_rows(root / "dashboard", REPEATS, SECONDS, WARMUP_SECONDS)
        rows += _policy_rows()
        (root / "soak").mkdir()
        rows += soak_rows(root / "soak")  # BENCH_SOAK_SECONDS (default 60; 0 skips it)
        rows += energy_rows(root)
        rows += waiter_rows(root / "waiters")
    rows += ledger_pair_rows() + budget_rows() + history_rows()  # benchmarks/totals.py
    rows += preview_rows()  # benchmarks/preview.py
    rows += process_tracking_rows()
    rows += notice_rows()
    rows += membership_rows()  # BENCH_CHILDREN, BENCH_MODES
    rows += preemption_rows()
    rows += following_rows()  # BENCH_OTHERS, BENCH_CARRIERS
    _print(rows)


if __name__ == "__main__":
    main()
