"""The dry run of a request against the size of the history, and against the grant itself.

A daemon whose caller (the one running the benchmark) is under `max_gpu_hours_per_month`,
with 0 or BENCH_PREVIEW_LEASES (default 50,000) of the caller's ended leases in the month:
the p50 of `POST /v1/leases/preview` for one GPU, and of the allocate + free pair, at both
sizes, round by round. A preview costs what a grant's checks cost (the budget read from the
running totals, no history scan), so both ratios stay near 1; the preview writes nothing, so
it is cheaper than the pair, whose grant and end each wait for a durable commit.

`python -m benchmarks.preview` prints the rows alone (BENCH_SECONDS, BENCH_REPEATS).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from gpulease import Client

from benchmarks.totals import configured_daemon, seed_month

__all__ = ["preview_rows"]

Row = tuple[str, str, str, str]

SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
PREVIEW_LEASES = int(os.environ.get("BENCH_PREVIEW_LEASES", "50000"))


def _p50_ms(calls: list[float]) -> float:
    return statistics.median(calls) * 1e3


def _round(size: int, seconds: float) -> tuple[float, float]:
    """The preview's p50 and the allocate + free pair's p50, in ms, over `size` leases."""
    uid = os.getuid()
    name = "root" if uid == 0 else os.environ.get("USER", str(uid))
    with tempfile.TemporaryDirectory(prefix="gpuallocd-preview-") as tmp:
        root = Path(tmp)
        seed_month(root / "state", size, [(uid, name)], time.time())
        config = "[limits]\nmax_gpu_hours_per_month = 1000000\n"
        with configured_daemon(root, config) as socket, Client(socket) as client:
            previews, pairs = [], []
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                client.preview(1)
                previews.append(time.perf_counter() - started)
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                client.free(client.allocate(1).id)
                pairs.append(time.perf_counter() - started)
    return _p50_ms(previews), _p50_ms(pairs)


def preview_rows(
    size: int = PREVIEW_LEASES, repeats: int = REPEATS, seconds: float = SECONDS
) -> list[Row]:
    small = [_round(0, seconds) for _ in range(repeats)]
    large = [_round(size, seconds) for _ in range(repeats)]
    rows = []
    for what, i in ((f"preview p50, 0 / {size:,} leases", 0), ("allocate+free p50, same", 1)):
        ratios = [b[i] / a[i] for a, b in zip(small, large, strict=True)]
        rows.append(
            (
                what,
                f"{statistics.median(a[i] for a in small):.3f} / "
                f"{statistics.median(b[i] for b in large):.3f} ms",
                f"{min(ratios):.2f}-{max(ratios):.2f}",
                f"ratio {statistics.median(ratios):.2f}, round by round",
            )
        )
    share = [a[0] / a[1] for a in small + large]
    rows.append(
        (
            "preview / allocate+free p50",
            f"{statistics.median(share):.2f}",
            f"{min(share):.2f}-{max(share):.2f}",
            "a dry run writes nothing: no commit to wait for",
        )
    )
    return rows


if __name__ == "__main__":
    for row in preview_rows():
        print("| " + " | ".join(row) + " |")
