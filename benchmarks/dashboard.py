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
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from benchmarks.daemon import RunningDaemon, running_daemon
from benchmarks.load import BenchResult, run_bench
from gpuallocd.dashboard.server import MAX_PER_SECOND_PER_CLIENT

Row = tuple[str, str, str, str]

LOADER = """
import sys, time, urllib.error, urllib.request
url, pause = sys.argv[1], float(sys.argv[2])
try:
    while True:
        try:
            urllib.request.urlopen(url, timeout=60).read()
            print("page", flush=True)
        except urllib.error.HTTPError as refused:  # 429 past the dashboard's rate: again
            print(refused.code, flush=True)
            continue
        time.sleep(pause)
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


PER_CLIENT_PER_SECOND = MAX_PER_SECOND_PER_CLIENT


def _page_ms(url: str, times: int = 5) -> float:
    """The median time of `times` page loads. The dashboard admits 5 loads a second per
    client (docs/dashboard.md): a 429 is waited out at that pace and not timed."""
    spent: list[float] = []
    deadline = time.monotonic() + 60
    while len(spent) < times and time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=60) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code != 429:
                raise
            time.sleep(1 / PER_CLIENT_PER_SECOND)
            continue
        spent.append((time.perf_counter() - started) * 1e3)
        time.sleep(1 / PER_CLIENT_PER_SECOND)
    return statistics.median(spent) if spent else float("nan")


def _spread(values: list[float], digits: int) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}" if len(values) > 1 else ""


def _loaded(socket_path: Path, url: str, pause: float, seconds: float) -> tuple[BenchResult, float]:
    """Pairs measured while a process loads the page; and how many pages it loaded a second."""
    with _loading(url, pause) as loader:
        _page_ms(url, 1)
        started = time.monotonic()
        result = run_bench(str(socket_path), clients=1, seconds=seconds)
        elapsed = time.monotonic() - started
    return result, _answers(loader)[0] / elapsed


def _answers(loader: subprocess.Popen[str]) -> tuple[int, int]:
    """Pages the loader got, and answers in all (pages and 429s)."""
    lines = list(loader.stdout or [])
    return sum(line.strip() == "page" for line in lines), len(lines)


def _cpu_per_page_ms(daemon: RunningDaemon, url: str, seconds: float) -> tuple[float, float, float]:
    """The daemon's CPU time per answer while a loop asks for the page, nothing else asked
    of it (a figure a loaded machine does not blur); pages and answers a second."""
    before = daemon.cpu_seconds()
    started = time.monotonic()
    with _loading(url, 0.0) as loader:
        time.sleep(seconds)
    spent, elapsed = daemon.cpu_seconds() - before, time.monotonic() - started
    pages, answers = _answers(loader)
    return spent / max(answers, 1) * 1e3, pages / elapsed, answers / elapsed


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
    """Round by round, nobody looking, a page a second, pages in a loop: the ratios are taken
    within each round (a shared machine drifts between rounds)."""
    port = _free_port()
    environment = {"GPUALLOCD_DASHBOARD_LISTEN": f"127.0.0.1:{port}"}
    url = f"http://127.0.0.1:{port}/"
    root.mkdir()
    quiet: list[BenchResult] = []
    paced: list[BenchResult] = []
    flat_out: list[BenchResult] = []
    rates: list[float] = []
    with running_daemon(root, environment=environment) as daemon:
        run_bench(str(daemon.socket), clients=1, seconds=max(warmup, 1.0))
        first = _page_ms(url, 1)
        again = _page_ms(url)
        cpu_ms, rate, asked = _cpu_per_page_ms(daemon, url, seconds)
        for _ in range(repeats):
            quiet.append(run_bench(str(daemon.socket), clients=1, seconds=seconds))
            paced.append(_loaded(daemon.socket, url, 1.0, seconds)[0])
            result, rate = _loaded(daemon.socket, url, 0.0, seconds)
            flat_out.append(result)
            rates.append(rate)
    ratios = [b.p99_ms / q.p99_ms for q, b in zip(quiet, flat_out, strict=True)]
    paced_ratios = [b.p99_ms / q.p99_ms for q, b in zip(quiet, paced, strict=True)]
    return [
        (
            "dashboard page, charts drawn",
            f"{first:.1f} ms",
            "",
            "thousands of leases in the ledger",
        ),
        ("dashboard page, charts of < 30 s ago", f"{again:.1f} ms", "", ""),
        (
            "daemon CPU per answer, page asked for in a loop",
            f"{cpu_ms:.2f} ms",
            "",
            f"{asked:.0f} answers/s, {rate:.0f} of them pages",
        ),
        *_rows("nobody looking", quiet, ""),
        *_rows("a page every second", paced, ""),
        *_rows("page loaded in a loop", flat_out, f"{statistics.median(rates):.0f} pages/s"),
        (
            "p99 a page a second / nobody looking, round by round",
            f"{statistics.median(paced_ratios):.2f}",
            _spread(paced_ratios, 2),
            "",
        ),
        (
            "p99 pages in a loop / nobody looking, round by round",
            f"{statistics.median(ratios):.2f}",
            _spread(ratios, 2),
            "",
        ),
    ]
