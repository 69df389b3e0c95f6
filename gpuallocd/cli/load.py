"""Load on a running daemon: allocate+free pairs from many client processes at once."""

from __future__ import annotations

import multiprocessing
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["BenchResult", "run_bench"]


@dataclass(frozen=True)
class BenchResult:
    clients: int
    seconds: float
    pairs: int
    refused: int
    errors: int
    pairs_per_second: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    allocate_p50_ms: float
    free_p50_ms: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _raw_loop(
    socket: str, seconds: float, count: int, policy: str | None, start_at: float, out: Any
) -> None:
    """The same loop through a bare HTTP client: what remains is the daemon's time."""
    from gpuallocd.cli.rawhttp import RawClient, RawHttpError

    pairs: list[tuple[float, float]] = []
    refused = errors = 0
    with RawClient(socket) as client:
        client.health()
        while time.time() < start_at:
            time.sleep(0.001)
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                lease_id = client.allocate(count, policy)
                granted = time.perf_counter()
                client.free(lease_id)
            except RawHttpError as exc:
                if exc.code == "gpus_unavailable":
                    refused += 1
                else:
                    errors += 1
                continue
            pairs.append((granted - started, time.perf_counter() - granted))
    out.put((pairs, refused, errors))


def _client_loop(
    socket: str, seconds: float, count: int, policy: str | None, start_at: float, out: Any
) -> None:
    from gpulease import Client, GpuallocError, GpusUnavailable

    pairs: list[tuple[float, float]] = []
    refused = errors = 0
    with Client(socket) as client:
        client.health()  # connect before the clock starts
        while time.time() < start_at:
            time.sleep(0.001)
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            try:
                lease = client.allocate(count, policy=policy, label="bench")
            except GpusUnavailable:
                refused += 1
                continue
            except GpuallocError:
                errors += 1
                continue
            granted = time.perf_counter()
            try:
                client.free(lease.id)
            except GpuallocError:
                errors += 1
                continue
            pairs.append((granted - started, time.perf_counter() - granted))
    out.put((pairs, refused, errors))


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, int(fraction * len(sorted_values)))
    return sorted_values[index] * 1000.0


def run_bench(
    socket: str,
    *,
    clients: int = 1,
    seconds: float = 5.0,
    count: int = 1,
    policy: str | None = None,
    raw: bool = False,
) -> BenchResult:
    """Drive the daemon on `socket` from `clients` processes for `seconds`; latencies in ms.

    `raw` drives it through a bare HTTP client instead of `gpulease`.
    """
    loop = _raw_loop if raw else _client_loop
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    start_at = time.time() + 0.5 + 0.02 * clients
    workers = [
        context.Process(target=loop, args=(socket, seconds, count, policy, start_at, out))
        for _ in range(clients)
    ]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=seconds + 60) for _ in workers]
    for worker in workers:
        worker.join()
    pairs = [pair for result in results for pair in result[0]]
    totals = sorted(a + f for a, f in pairs)
    return BenchResult(
        clients=clients,
        seconds=seconds,
        pairs=len(pairs),
        refused=sum(r[1] for r in results),
        errors=sum(r[2] for r in results),
        pairs_per_second=len(pairs) / seconds,
        p50_ms=_percentile(totals, 0.50),
        p90_ms=_percentile(totals, 0.90),
        p99_ms=_percentile(totals, 0.99),
        max_ms=totals[-1] * 1000.0 if totals else float("nan"),
        allocate_p50_ms=statistics.median(a for a, _ in pairs) * 1000.0 if pairs else float("nan"),
        free_p50_ms=statistics.median(f for _, f in pairs) * 1000.0 if pairs else float("nan"),
    )
