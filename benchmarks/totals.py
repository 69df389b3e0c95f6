"""Budgets and long reads against the size of the history, each at two sizes, as ratios.

Budget: a user (`nobody`) under `max_gpu_hours_per_month` with 0 or BENCH_BUDGET_LEASES
(default 50,000) ended leases in the month allocates and frees in a loop, while another
user with no limit (the one running the benchmark) does the same: the other user's p50 and
p99, and the budgeted user's own allocate p50, at both sizes. Needs root (the budgeted
client runs as `nobody`).

History: `usage --since 30d` (`GET /v1/usage`, and the ledger's accounting read alone, in
the process) and the dashboard's page with its charts drawn, over a ledger of 0 or
BENCH_HISTORY_LEASES (default 1,000,000) ended leases of 40 users in the last 30 days, each
with one energy reading.

Bookkeeping: what the ledger's own grant and end of one lease cost (CPU time in the process,
durable commits), the figure the running totals add to.

`python -m benchmarks.totals` prints the rows alone (BENCH_SECONDS, BENCH_REPEATS).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pwd
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.daemon import INVENTORY, wait_until_serving
from benchmarks.load import BenchResult, run_bench
from gpuallocd.inventory import open_inventory
from gpuallocd.ledger import Ledger, LedgerReader
from gpuallocd.model import Lease, LeasedGpu, LeaseState

__all__ = ["budget_rows", "configured_daemon", "history_rows", "ledger_pair_rows", "seed_month"]

Row = tuple[str, str, str, str]

SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
BUDGET_LEASES = int(os.environ.get("BENCH_BUDGET_LEASES", "50000"))
HISTORY_LEASES = int(os.environ.get("BENCH_HISTORY_LEASES", "1000000"))
DAY = 86400.0
MONTH = 30 * DAY
BUDGETED = "nobody"
USERS = 40
BATCH = 20_000

_LEASE = (
    "INSERT INTO leases (id, owner_uid, owner_name, pid, label, policy, created_at, "
    "expires_at, state, ended_at, bound, pid_start_time, waited_seconds) "
    "VALUES (?, ?, ?, NULL, NULL, 'simple', ?, ?, 'freed', ?, 0, NULL, ?)"
)
_GPU = (
    "INSERT INTO lease_gpus (lease_id, gpu_uuid, gpu_index, position, active, kind, gpu_of, "
    "memory_bytes, profile, fraction) VALUES (?, ?, ?, 0, 0, 'whole', ?, NULL, NULL, 1.0)"
)
_EVENT = "INSERT INTO history (lease_id, event, actor_uid, at, detail) VALUES (?, ?, ?, ?, NULL)"
_ENERGY = (
    "INSERT INTO energy_use (lease_id, owner_uid, owner_name, at, joules, estimate, "
    "gpu_seconds) VALUES (?, ?, ?, ?, 15000.0, 0, 0)"
)


def seed_month(state_dir: Path, count: int, owners: list[tuple[int, str]], now: float) -> None:
    """A ledger in `state_dir` holding `count` ended leases of `owners` in turn, spread evenly
    over the 30 days before `now` (each 60 s on one GPU, 5 s waited, one energy reading at its
    end), written in bulk; then the ledger's running totals are rebuilt from them, as a
    migration or a recovery rebuilds them."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = state_dir / "ledger.sqlite3"
    gpus = open_inventory(INVENTORY).topology().gpus
    ledger = Ledger(path, sync="normal")
    ledger.sync_gpus(gpus, 0.0)
    ledger.close()
    step = (MONTH - 3600.0) / max(count, 1)
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous=OFF")
        for first in range(0, count, BATCH):
            leases, units, events, energy = [], [], [], []
            for n in range(first, min(first + BATCH, count)):
                uid, name = owners[n % len(owners)]
                gpu = gpus[n % len(gpus)]
                start = now - MONTH + n * step
                end = start + 60.0
                lease_id = f"seed{n:08x}"
                leases.append((lease_id, uid, name, start, start + 3600.0, end, 5.0))
                units.append((lease_id, gpu.uuid, gpu.index, gpu.uuid))
                events += [(lease_id, "granted", uid, start), (lease_id, "freed", uid, end)]
                energy.append((lease_id, uid, name, end))
            conn.execute("BEGIN")
            conn.executemany(_LEASE, leases)
            conn.executemany(_GPU, units)
            conn.executemany(_EVENT, events)
            conn.executemany(_ENERGY, energy)
            conn.execute("COMMIT")
    finally:
        conn.close()
    ledger = Ledger(path, sync="normal")
    try:
        ledger.rebuild_totals()
    finally:
        ledger.close()


@contextlib.contextmanager
def configured_daemon(
    root: Path, config: str, environment: dict[str, str] | None = None
) -> Iterator[Path]:
    """A daemon on `root` with `config` as its config file; its socket."""
    socket = root / "gpuallocd.sock"
    config_file = root / "gpuallocd.toml"
    config_file.write_text(config)
    environ = {
        **os.environ,
        "GPUALLOCD_SOCKET": str(socket),
        "GPUALLOCD_STATE_DIR": str(root / "state"),
        "GPUALLOCD_INVENTORY": INVENTORY,
        "GPUALLOCD_LEDGER_SYNC": "full",
        **(environment or {}),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuallocd", "--config", str(config_file)],
        env=environ,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_serving(socket, process)
        yield socket
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def _pairs_as(uid: int, gid: int, socket: str, seconds: float, out: Any) -> None:
    """Allocate and free for `seconds` as `uid`; the pairs' (allocate, free) seconds."""
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    from gpulease import Client

    pairs: list[tuple[float, float]] = []
    with Client(socket) as client:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            lease = client.allocate(1, label="budgeted")
            granted = time.perf_counter()
            client.free(lease.id)
            pairs.append((granted - started, time.perf_counter() - granted))
    out.put(pairs)


def _budget_round(size: int, seconds: float) -> tuple[BenchResult, float]:
    """The other user's pairs while the budgeted one loops; the budgeted one's allocate p50."""
    budgeted = pwd.getpwnam(BUDGETED)
    now = time.time()
    with tempfile.TemporaryDirectory(prefix="gpuallocd-budget-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        seed_month(root / "state", size, [(budgeted.pw_uid, BUDGETED)], now)
        config = f"[limits.user.{BUDGETED}]\nmax_gpu_hours_per_month = 1000000\n"
        with configured_daemon(root, config) as socket:
            run_bench(str(socket), clients=1, seconds=1.0)  # warm up
            fork = multiprocessing.get_context("fork")
            out = fork.Queue()
            looping = fork.Process(
                target=_pairs_as,
                args=(budgeted.pw_uid, budgeted.pw_gid, str(socket), seconds + 1.5, out),
            )
            looping.start()
            time.sleep(0.5)
            other = run_bench(str(socket), clients=1, seconds=seconds)
            pairs = out.get(timeout=seconds + 120)
            looping.join(30)
    own = statistics.median(a for a, _ in pairs) * 1e3 if pairs else float("nan")
    return other, own


def _ratio_rows(what: str, small: list[float], large: list[float], unit: str) -> list[Row]:
    ratios = [b / a for a, b in zip(small, large, strict=True)]
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}" if len(ratios) > 1 else ""
    return [
        (
            what,
            f"{statistics.median(small):.3f} / {statistics.median(large):.3f} {unit}",
            spread,
            f"ratio {statistics.median(ratios):.2f}, round by round",
        )
    ]


def budget_rows(
    size: int = BUDGET_LEASES, seconds: float = SECONDS, repeats: int = REPEATS
) -> list[Row]:
    """Budget 0 / `size` leases in the month, in rounds (each size once a round)."""
    if os.geteuid() != 0:
        return [("budget 0 / 50k leases", "not measured", "", "needs root (a second user)")]
    p50: tuple[list[float], list[float]] = ([], [])
    p99: tuple[list[float], list[float]] = ([], [])
    own: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for index, leases in enumerate((0, size)):
            other, mine = _budget_round(leases, seconds)
            p50[index].append(other.p50_ms)
            p99[index].append(other.p99_ms)
            own[index].append(mine)
    label = f"budget 0 / {size:,} leases in the month"
    return [
        *_ratio_rows(f"{label}: another user's allocate(1)+free p50", *p50, "ms"),
        *_ratio_rows(f"{label}: another user's allocate(1)+free p99", *p99, "ms"),
        *_ratio_rows(f"{label}: the budgeted user's own allocate p50", *own, "ms"),
    ]


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _page_ms(url: str) -> float:
    """One load of the dashboard's page (its charts drawn on a first load)."""
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as answer:
        answer.read()
    return (time.perf_counter() - started) * 1e3


def _usage_ms(socket: Path, now: float) -> float:
    from gpulease import Client

    with Client(socket, timeout=600) as client:
        started = time.perf_counter()
        client.usage(since=now - MONTH)
        return (time.perf_counter() - started) * 1e3


def _read_usage_ms(path: Path, now: float) -> float:
    """The ledger's accounting read of the month alone, as the API's reads thread runs it."""
    reader = LedgerReader(path)
    try:
        started = time.perf_counter()
        reader.usage(now - MONTH, now)
        return (time.perf_counter() - started) * 1e3
    finally:
        reader.close()


def _history_round(size: int, repeats: int) -> tuple[float, float, float]:
    """usage --since 30d (the median of `repeats`), the dashboard's first page, and the
    accounting read alone."""
    now = time.time()
    owners = [(2000 + n, f"user{n}") for n in range(USERS)]
    with tempfile.TemporaryDirectory(prefix="gpuallocd-history-") as tmp:
        root = Path(tmp)
        seed_month(root / "state", size, owners, now)
        port = _free_port()
        environment = {"GPUALLOCD_DASHBOARD_LISTEN": f"127.0.0.1:{port}"}
        with configured_daemon(root, "", environment) as socket:
            page = _page_ms(f"http://127.0.0.1:{port}/")
            usage = statistics.median(_usage_ms(socket, now) for _ in range(repeats))
        path = root / "state" / "ledger.sqlite3"
        read = statistics.median(_read_usage_ms(path, now) for _ in range(repeats))
    return usage, page, read


def history_rows(size: int = HISTORY_LEASES, repeats: int = REPEATS) -> list[Row]:
    """History 0 / `size` ended leases in the month: usage --since 30d, the dashboard."""
    usage: tuple[list[float], list[float]] = ([], [])
    page: tuple[list[float], list[float]] = ([], [])
    read: tuple[list[float], list[float]] = ([], [])
    for index, leases in enumerate((0, size)):
        found = _history_round(leases, repeats)
        usage[index].append(found[0])
        page[index].append(found[1])
        read[index].append(found[2])
    label = f"history 0 / {size:,} ended leases in the month"
    return [
        *_ratio_rows(f"{label}: usage --since 30d", *usage, "ms"),
        *_ratio_rows(f"{label}: usage's accounting read alone", *read, "ms"),
        *_ratio_rows(f"{label}: dashboard page, charts drawn", *page, "ms"),
    ]


def _pair_cpu_us(path: Path, pairs: int) -> float:
    """CPU time of the ledger's grant and end of one lease (durable commits), per pair."""
    gpus = open_inventory(INVENTORY).topology().gpus
    ledger = Ledger(path)
    try:
        ledger.sync_gpus(gpus, 0.0)
        now = time.time()
        started = time.process_time()
        for n in range(pairs):
            at = now + n
            lease = Lease(
                id=f"pair{n:08x}",
                gpus=(LeasedGpu(gpus[0].uuid, gpus[0].index),),
                owner_uid=1000,
                owner_name="bench",
                pid=None,
                label=None,
                policy="simple",
                created_at=at,
                expires_at=at + 3600.0,
            )
            ledger.grant(lease, 1000)
            ledger.end([lease.ended(LeaseState.FREED, at + 0.5)], 1000)
        return (time.process_time() - started) / pairs * 1e6
    finally:
        ledger.close()


def ledger_pair_rows(pairs: int = 2000, repeats: int = REPEATS) -> list[Row]:
    """The ledger's own grant+end, CPU per pair (median of `repeats` fresh ledgers)."""
    found = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="gpuallocd-pair-") as tmp:
            found.append(_pair_cpu_us(Path(tmp) / "ledger.sqlite3", pairs))
    spread = f"{min(found):.0f}-{max(found):.0f}" if len(found) > 1 else ""
    note = "grant + end statements and 2 durable commits, in the process"
    return [
        ("ledger grant+end of one lease, CPU", f"{statistics.median(found):.0f} us", spread, note)
    ]


if __name__ == "__main__":
    for row in ledger_pair_rows() + budget_rows() + history_rows():
        print("| " + " | ".join(row) + " |")
