"""A blocked request's grant through a preemption whose job acknowledges at once, against the
floor of a free GPU's grant (docs/preemption.md), on a real daemon over its socket.

Every GPU is held preemptible by a second user (one lease of all 32, or 32 leases of one: the
rule chooses among one candidate or among 32); the benchmark's user asks for one GPU and
waits. The holder hears of the preemption from its notices' long poll and acknowledges at
once. Measured: from the request to its grant (the decision and its commit, the warning
told, the acknowledgement and its commit, the grant and its commit, and the round trips),
against an allocate of a free GPU. The holder is another uid (a fork that drops to
`nobody`): nobody preempts their own lease, so this needs root; elsewhere the row says so.

`python -m benchmarks.preemption` prints the rows alone (BENCH_PREEMPTION_ROUNDS).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpulease import Client

from benchmarks.daemon import running_daemon

__all__ = ["preemption_rows"]

ROUNDS = int(os.environ.get("BENCH_PREEMPTION_ROUNDS", "30"))
GPUS = 32
NOBODY = 65534
Row = tuple[str, str, str, str]
SETTINGS = {
    "GPUALLOCD_PREEMPT_MIN_RUNTIME_SECONDS": "0",
    "GPUALLOCD_PREEMPT_LEAD_SECONDS": "30",  # the job acknowledges long before its signal
    "GPUALLOCD_PREEMPT_GRACE_SECONDS": "60",
}


def _holder(socket: Path, leases: int, orders: int, answers: int) -> None:
    """The second user: on each order, take every GPU preemptible in `leases` leases, say so,
    acknowledge the first preemption it is told of, say so; free the rest on the next order."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    with Client(socket) as client:
        after = client.notifications()["next"]
        while os.read(orders, 1) == b"t":
            held = [
                client.allocate(GPUS // leases, preemptible=True, ttl=3600) for _ in range(leases)
            ]
            os.write(answers, b"h")
            while True:
                feed = client.notifications(after=after, wait=30)
                after = feed["next"]
                told = [n for n in feed["notices"] if n["data"].get("reason") == "preemption"]
                if told:
                    client.checkpoint_done(told[0]["lease_id"], "/scratch/bench.pt")
                    break
            os.read(orders, 1)  # the grant was measured: give the rest back
            for lease in held:
                if lease.id != told[0]["lease_id"]:
                    client.free(lease.id)
            os.write(answers, b"f")


@contextmanager
def _second_user(socket: Path, leases: int) -> Iterator[tuple[int, int]]:
    orders_read, orders = os.pipe()
    answers, answers_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _holder(socket, leases, orders_read, answers_write)
        finally:
            os._exit(0)
    try:
        yield orders, answers
    finally:
        os.write(orders, b"q")
        os.waitpid(pid, 0)


def _through_preemption(socket: Path, leases: int) -> list[float]:
    """Seconds from a blocked request to its grant, each round."""
    times = []
    with _second_user(socket, leases) as (orders, answers), Client(socket) as client:
        for _ in range(ROUNDS):
            os.write(orders, b"t")
            os.read(answers, 1)
            started = time.perf_counter()
            lease = client.allocate(1, wait=True, timeout=60)
            times.append(time.perf_counter() - started)
            client.free(lease.id)
            os.write(orders, b"g")
            os.read(answers, 1)
    return times


def _floor(socket: Path) -> list[float]:
    """Seconds of an allocate of a free GPU (its free not counted), each round."""
    times = []
    with Client(socket) as client:
        for _ in range(ROUNDS):
            started = time.perf_counter()
            lease = client.allocate(1, wait=True, timeout=60)
            times.append(time.perf_counter() - started)
            client.free(lease.id)
    return times


def preemption_rows() -> list[Row]:
    if os.geteuid() != 0:
        return [("preemption: blocked request to grant", "needs root", "", "a second user holds")]
    with tempfile.TemporaryDirectory(prefix="gpuallocd-bench-preempt-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # the second user reaches the socket
        with running_daemon(root, environment=SETTINGS) as daemon:
            floor = statistics.median(_floor(daemon.socket)) * 1e3
            one = statistics.median(_through_preemption(daemon.socket, 1)) * 1e3
            many = statistics.median(_through_preemption(daemon.socket, GPUS)) * 1e3
    return [
        ("preemption: a free GPU's grant (the floor)", f"{floor:.2f} ms", "", f"{ROUNDS} rounds"),
        (
            "preemption: blocked request to grant, the job acknowledging at once",
            f"{one:.2f} ms",
            "",
            f"x{one / floor:.1f} the floor; one preemptible lease holds all {GPUS} GPUs",
        ),
        (
            f"preemption: the same among {GPUS} preemptible leases",
            f"{many:.2f} ms",
            "",
            f"x{many / floor:.1f} the floor; x{many / one:.2f} the one-lease case",
        ),
    ]


if __name__ == "__main__":
    for row in preemption_rows():
        print("| " + " | ".join(row) + " |")
