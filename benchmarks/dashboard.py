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
url, count = sys.argv[1], 0
started = time.monotonic()
try:
    while True:
        urllib.request.urlopen(url, timeout=60).read()
        count += 1
        if count % 5 == 0:
            print(count, time.monotonic() - started, flush=True)
except KeyboardInterrupt:
    pass
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _loading(url: str) -> Iterator[subprocess.Popen[str]]:
    """A process that loads `url` over and over, as a browser left open would, but faster."""
    process = subprocess.Popen(
        [sys.executable, "-c", LOADER, url], stdout=subprocess.PIPE, text=True
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


def dashboard_rows(root: Path, repeats: int, seconds: float, warmup: float) -> list[Row]:
    port = _free_port()
    environment = {"GPUALLOCD_DASHBOARD_LISTEN": f"127.0.0.1:{port}"}
    url = f"http://127.0.0.1:{port}/"
    root.mkdir()
    with running_daemon(root, environment=environment) as daemon:
        run_bench(str(daemon.socket), clients=1, seconds=max(warmup, 1.0))
        page = _page_ms(url)
        quiet = _pairs(daemon.socket, repeats, seconds)
        with _loading(url) as loader:
            _page_ms(url, 1)
            started = time.monotonic()
            busy = _pairs(daemon.socket, repeats, seconds)
            elapsed = time.monotonic() - started
        loads = sum(1 for _ in (loader.stdout or []))
    rows: list[Row] = [
        ("dashboard page, idle daemon", f"{page:.1f} ms", "", "30 d of leases drawn")
    ]
    for label, runs in (("nobody looking", quiet), ("page loaded in a loop", busy)):
        for name in ("p50", "p99"):
            values = [getattr(r, f"{name}_ms") for r in runs]
            rows.append(
                (
                    f"allocate(1)+free {name}, {label}",
                    f"{statistics.median(values):.3f} ms",
                    _spread(values, 3),
                    "",
                )
            )
    ratio = statistics.median(r.p99_ms for r in busy) / statistics.median(r.p99_ms for r in quiet)
    rows.append(
        ("p99 while loading / p99 quiet", f"{ratio:.2f}", "", f"~{loads * 5 / elapsed:.1f} pages/s")
    )
    return rows
