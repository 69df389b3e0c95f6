"""What many waiters cost others: a grant of another GPU, the queue view, and the drain.

A daemon of its own on the 32-GPU example (durable commits) with GPU 0 held; a crowd of
requests waits for GPU 0 (bare connections from this process, each `{"gpus": [0], "wait":
true}`; as many connections per user as it takes). Each row is measured at two sizes, in
rounds that take both sizes in turn, and printed with the ratio of the larger to the smaller
within each round (median of the rounds):

- allocate(1)+free p50 of one more request, which any GPU but GPU 0 serves, with no waiter
  and with BENCH_WAITERS (default 1,000) waiting: no waiter can use what it takes;
- the queue view (`GET /v1/queue`, the answer read whole) with a tenth of them and with all;
- the drain: GPU 0 freed, each waiter granted in turn frees its lease at once; the time until
  the last one is served, with a tenth and with all, and the time per waiter.

The waiters run as the benchmark's own user. `python -m benchmarks.waiters` prints the rows
alone (BENCH_SECONDS, BENCH_REPEATS, BENCH_WAITERS).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from benchmarks.daemon import RunningDaemon, running_daemon
from benchmarks.load import run_bench

__all__ = ["waiter_rows"]

SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
WAITERS = int(os.environ.get("BENCH_WAITERS", "1000"))
VIEW_READS = 5

Row = tuple[str, str, str, str]

_WAIT_BODY = b'{"gpus": [0], "wait": true, "label": "crowd"}'
_WAIT = (
    b"POST /v1/leases HTTP/1.1\r\nHost: gpuallocd\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_WAIT_BODY), _WAIT_BODY)
)
_QUEUE = b"GET /v1/queue HTTP/1.1\r\nHost: gpuallocd\r\n\r\n"


def _answer(sock: socket.socket) -> bytes:
    """One whole answer (its body by Content-Length), read from a blocking socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        body += chunk
    return body


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    return sock


def _queue_seconds(path: Path) -> tuple[float, int]:
    """One read of the queue view: its time and how many waiters it listed."""
    with contextlib.closing(_connect(path)) as sock:
        started = time.perf_counter()
        sock.sendall(_QUEUE)
        body = _answer(sock)
        return time.perf_counter() - started, body.count(b'"position"')


def _wait_for_queue(path: Path, length: int, limit: float = 600.0) -> None:
    deadline = time.monotonic() + limit
    while _queue_seconds(path)[1] != length:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the queue never reached {length} waiters")
        time.sleep(0.2)


@contextlib.contextmanager
def _crowd(path: Path, size: int) -> Iterator[list[socket.socket]]:
    """`size` requests waiting for GPU 0, queued before the block runs; hung up after it."""
    crowd: list[socket.socket] = []
    try:
        for _ in range(size):
            sock = _connect(path)
            sock.sendall(_WAIT)
            crowd.append(sock)
        _wait_for_queue(path, size)
        yield crowd
    finally:
        for sock in crowd:
            sock.close()
    if size:
        _wait_for_queue(path, 0)


def _free(sock: socket.socket, answer: bytes) -> None:
    """Free the lease granted in `answer`, on the connection it came by."""
    lease_id = json.loads(answer)["id"]
    sock.sendall(f"DELETE /v1/leases/{lease_id} HTTP/1.1\r\nHost: gpuallocd\r\n\r\n".encode())
    _answer(sock)


def _hold_gpu_0(path: Path) -> tuple[socket.socket, bytes]:
    """A lease of GPU 0, the GPU the crowd waits for: its connection and its grant."""
    sock = _connect(path)
    body = b'{"gpus": [0], "label": "holder"}'
    sock.sendall(
        b"POST /v1/leases HTTP/1.1\r\nHost: gpuallocd\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    return sock, _answer(sock)


def _drain_seconds(path: Path, size: int) -> float:
    """Free GPU 0 under `size` waiters; each frees its lease when granted. Seconds until the
    last is served."""
    holder, grant = _hold_gpu_0(path)
    with (
        contextlib.closing(holder),
        _crowd(path, size) as crowd,
        selectors.DefaultSelector() as selector,
    ):
        for waiter in crowd:
            selector.register(waiter, selectors.EVENT_READ, waiter)
        started = time.perf_counter()
        _free(holder, grant)
        served = 0
        while served < size:
            for key, _ in selector.select(timeout=60):
                granted: socket.socket = key.data
                selector.unregister(granted)
                _free(granted, _answer(granted))
                served += 1
        return time.perf_counter() - started


def _view_seconds(path: Path) -> float:
    return statistics.median(_queue_seconds(path)[0] for _ in range(VIEW_READS))


def _pair_ms(path: Path) -> float:
    return run_bench(str(path), clients=1, seconds=SECONDS, raw=True).p50_ms


def _measure(daemon: RunningDaemon, small: int, large: int) -> dict[str, list[float]]:
    path = daemon.socket
    found: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        found.setdefault(name, []).append(value)

    run_bench(str(path), clients=1, seconds=1.0, raw=True)  # warm up
    for _ in range(REPEATS):
        holder, grant = _hold_gpu_0(path)
        with contextlib.closing(holder):
            add("pair_0", _pair_ms(path))
            with _crowd(path, large):
                add("pair_n", _pair_ms(path))
                add("view_n", _view_seconds(path))
            with _crowd(path, small):
                add("view_small", _view_seconds(path))
            _free(holder, grant)
        add("drain_small", _drain_seconds(path, small))
        add("drain_n", _drain_seconds(path, large))
    return found


def _spread(values: list[float], digits: int) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}" if len(values) > 1 else ""


def _rows(found: dict[str, list[float]], small: int, large: int) -> list[Row]:
    def ratio(top: str, bottom: str, scale: float = 1.0) -> list[float]:
        return [t / b / scale for t, b in zip(found[top], found[bottom], strict=True)]

    def row(what: str, values: list[float], unit: str, digits: int, note: str = "") -> Row:
        return (
            what,
            f"{statistics.median(values):.{digits}f} {unit}".rstrip(),
            _spread(values, digits),
            note,
        )

    sizes = large / small
    return [
        row("allocate(1)+free p50, nobody waiting", found["pair_0"], "ms", 3),
        row(f"allocate(1)+free p50, {large} waiting for GPU 0", found["pair_n"], "ms", 3),
        row(
            f"  {large} waiting / none, round by round",
            ratio("pair_n", "pair_0"),
            "",
            2,
            "goal <= 2",
        ),
        row(f"queue view, {small} waiting", [v * 1e3 for v in found["view_small"]], "ms", 1),
        row(f"queue view, {large} waiting", [v * 1e3 for v in found["view_n"]], "ms", 1),
        row(
            f"  per waiter, {large} / {small}, round by round",
            ratio("view_n", "view_small", sizes),
            "",
            2,
            "1 is linear",
        ),
        row(f"drain of {small} waiters", found["drain_small"], "s", 3),
        row(f"drain of {large} waiters", found["drain_n"], "s", 3),
        row(
            f"  per waiter, {large} / {small}, round by round",
            ratio("drain_n", "drain_small", sizes),
            "",
            2,
            "1 is linear",
        ),
    ]


def waiter_rows(root: Path) -> list[Row]:
    """The rows, from a daemon of its own under `root` (made if need be)."""
    root.mkdir(parents=True, exist_ok=True)
    large = WAITERS
    small = max(1, large // 10)
    settings = {
        "GPUALLOCD_MAX_CONNECTIONS_PER_USER": str(large + 64),
        "GPUALLOCD_MAX_CONNECTIONS": str(large + 256),
    }
    with running_daemon(root, environment=settings) as daemon:
        found = _measure(daemon, small, large)
    return _rows(found, small, large)


def main(rows: Callable[[Path], list[Row]] = waiter_rows) -> None:
    with tempfile.TemporaryDirectory(prefix="gpuallocd-bench-") as tmp:
        print("| what | median | spread | goal / note |")
        print("|---|---|---|---|")
        for row in rows(Path(tmp)):
            print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
