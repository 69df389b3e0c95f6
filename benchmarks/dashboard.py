"""Does a page of the dashboard delay allocations? allocate(1)+free from one client, with
nobody looking and while another process loads the whole page in a loop.

The daemon first serves BENCH_WARMUP seconds of pairs, so its ledger holds thousands of
leases of the last day: each page reads and draws them (30 days of usage, 24 h timeline).
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from benchmarks.daemon import running_daemon
from gpuallocd.cli.load import BenchResult, run_bench

Row = tuple[str, str, str, str]

LOADER = """
import sys, time, urllib.request
url, pause, count = sys.argv[1], float(sys.argv[2]), 0
started = time.monotonic()
try:
    while True:
        urllib.request.urlopen(url, timeout=60).read()
        time.sleep(pause)
        count += 1
        print(count, time.monotonic() - started, flush=True)
except KeyboardInterrupt:
    pass
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _loading(url: str, pause: float) -> Iterator[subprocess.Popen[str]]:
    """A process that loads `url` over and over, `pause` seconds between loads."""
    process = subprocess.Popen(
        [sys.executable, "-c", LOADER, url, str(pause)], stdout=subprocess.PIPE, text=True
    )
    try:
        yield process
    finally:
        process.terminate()
        process.wait(30)


def _page_ms(url: str, times: int = 5) -> float:
    spent = []
    for _ in range(times):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as answer:
            answer.read()
        spent.append((time.perf_counter() - started) * 1e3)
    return statistics.median(spent)


def _pairs(socket_path: Path, repeats: int, seconds: float) -> list[BenchResult]:
    return [run_bench(str(socket_path), clients=1, seconds=seconds) for _ in range(repeats)]


def _spread(values: list[float], digits: int) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}" if len(values) > 1 else ""


def _loaded(
    socket_path: Path, url: str, pause: float, repeats: int, seconds: float
) -> tuple[list[BenchResult], float]:
    """Pairs measured while a process loads the page; and how many pages it loaded a second."""
    with _loading(url, pause) as loader:
        _page_ms(url, 1)
        started = time.monotonic()
        runs = _pairs(socket_path, repeats, seconds)
        elapsed = time.monotonic() - started
    loads = sum(1 for _ in (loader.stdout or []))
    return runs, loads / elapsed


def _rows(label: str, runs: list[BenchResult], note: str) -> list[Row]:
    return [
        (
            f"allocate(1)+free {name}, {label}",
            f"{statistics.median(values):.3f} ms",
            _spread(values, 3),
            note,
        )
        for name in ("p50", "p99")
        if (values := [getattr(r, f"{name}_ms") for r in runs])
    ]


def dashboard_rows(root: Path, repeats: int, seconds: float, warmup: float) -> list[Row]:
    port = _free_port()
    environment = {"GPUALLOCD_DASHBOARD_LISTEN": f"127.0.0.1:{port}"}
    url = f"http://127.0.0.1:{port}/"
    root.mkdir()
    with running_daemon(root, environment=environment) as daemon:
        run_bench(str(daemon.socket), clients=1, seconds=max(warmup, 1.0))
        first = _page_ms(url, 1)
        again = _page_ms(url)
        quiet = _pairs(daemon.socket, repeats, seconds)
        flat_out, flat_rate = _loaded(daemon.socket, url, 0.0, repeats, seconds)
        paced, paced_rate = _loaded(daemon.socket, url, 1.0, repeats, seconds)
    ratio = statistics.median(r.p99_ms for r in flat_out) / statistics.median(
        r.p99_ms for r in quiet
    )
    return [
        (
            "dashboard page, charts drawn",
            f"{first:.1f} ms",
            "",
            "thousands of leases in the ledger",
        ),
        ("dashboard page, charts of < 30 s ago", f"{again:.1f} ms", "", ""),
        *_rows("nobody looking", quiet, ""),
        *_rows("a page every second", paced, f"{paced_rate:.1f} pages/s"),
        *_rows("page loaded in a loop", flat_out, f"{flat_rate:.1f} pages/s"),
        ("p99 in a loop / p99 nobody looking", f"{ratio:.2f}", "", ""),
    ]
