"""Load on a running daemon: allocate+free pairs from many client processes at once."""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Callable
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
    refused_p50_ms: float = float("nan")  # how long a refusal took (no commit)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _timed_pairs(
    allocate: Callable[[], str],
    free: Callable[[str], object],
    refusal: Callable[[Exception], bool | None],
    seconds: float,
    start_at: float,
) -> tuple[list[tuple[float, float]], list[float], int]:
    """Allocate and free for `seconds` from `start_at`: each pair's two latencies, each
    refusal's (`refusal(exc)` True), and the count of errors (False); other exceptions
    propagate (`refusal` returns None for them)."""
    pairs: list[tuple[float, float]] = []
    refused: list[float] = []
    errors = 0
    while time.time() < start_at:
        time.sleep(0.001)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        try:
            lease_id = allocate()
            granted = time.perf_counter()
            free(lease_id)
        except Exception as exc:
            verdict = refusal(exc)
            if verdict is None:
                raise
            if verdict:
                refused.append(time.perf_counter() - started)
            else:
                errors += 1
            continue
        pairs.append((granted - started, time.perf_counter() - granted))
    return pairs, refused, errors


def _raw_loop(
    socket: str, seconds: float, count: int, policy: str | None, start_at: float, out: Any
) -> None:
    """The same loop through a bare HTTP client: what remains is the daemon's time."""
    from benchmarks.rawhttp import RawClient, RawHttpError

    def refusal(exc: Exception) -> bool | None:
        return exc.code == "gpus_unavailable" if isinstance(exc, RawHttpError) else None

    with RawClient(socket) as client:
        client.health()  # connect before the clock starts

        def allocate() -> str:
            return client.allocate(count, policy)

        out.put(_timed_pairs(allocate, client.free, refusal, seconds, start_at))


def _client_loop(
    socket: str, seconds: float, count: int, policy: str | None, start_at: float, out: Any
) -> None:
    from gpulease import Client, GpuallocError, GpusUnavailable

    def refusal(exc: Exception) -> bool | None:
        if isinstance(exc, GpusUnavailable):
            return True
        return False if isinstance(exc, GpuallocError) else None

    with Client(socket) as client:
        client.health()  # connect before the clock starts

        def allocate() -> str:
            return client.allocate(count, policy=policy, label="bench").id

        out.put(_timed_pairs(allocate, client.free, refusal, seconds, start_at))


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
    refusals = sorted(r for result in results for r in result[1])
    totals = sorted(a + f for a, f in pairs)
    return BenchResult(
        clients=clients,
        seconds=seconds,
        pairs=len(pairs),
        refused=len(refusals),
        errors=sum(r[2] for r in results),
        pairs_per_second=len(pairs) / seconds,
        p50_ms=_percentile(totals, 0.50),
        p90_ms=_percentile(totals, 0.90),
        p99_ms=_percentile(totals, 0.99),
        max_ms=totals[-1] * 1000.0 if totals else float("nan"),
        allocate_p50_ms=statistics.median(a for a, _ in pairs) * 1000.0 if pairs else float("nan"),
        free_p50_ms=statistics.median(f for _, f in pairs) * 1000.0 if pairs else float("nan"),
        refused_p50_ms=_percentile(refusals, 0.50),
    )
