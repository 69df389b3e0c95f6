"""Heavy reads against allocations: one client reads `history` and `usage` as fast as it can
over a ledger of many ended leases while another allocates and frees; the allocating
client's p99 with and without the reader.

`python -m benchmarks.reads` prints the rows alone (BENCH_SECONDS, BENCH_LEASES).
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path

from benchmarks.daemon import INVENTORY, running_daemon
from benchmarks.load import run_bench
from gpuallocd.inventory import open_inventory
from gpuallocd.ledger import Ledger
from gpuallocd.model import Lease, LeasedGpu, LeaseState

__all__ = ["read_rows", "seed_ended_leases"]

LEASES = int(os.environ.get("BENCH_LEASES", "22000"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
BATCH = 1000
HISTORY_LIMIT = 10_000


def seed_ended_leases(state_dir: Path, count: int) -> None:
    """A ledger in `state_dir` holding `count` ended leases, one a minute up to an hour ago
    (the daemon finds it as it would after weeks of service, none past its retention)."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    topology = open_inventory(INVENTORY).topology()
    ledger = Ledger(state_dir / "ledger.sqlite3", sync="normal")
    try:
        ledger.sync_gpus(topology.gpus, 0.0)
        start = time.time() - count * 60.0 - 3600.0
        for first in range(0, count, BATCH):
            with ledger.unit_of_work():
                for n in range(first, min(first + BATCH, count)):
                    gpu = topology.gpus[n % len(topology.gpus)]
                    at = start + n * 60.0
                    lease = Lease(
                        id=f"seed{n:08x}",
                        gpus=(LeasedGpu(gpu.uuid, gpu.index),),
                        owner_uid=1000 + n % 40,
                        owner_name=f"user{n % 40}",
                        pid=None,
                        label=None,
                        policy="simple",
                        created_at=at,
                        expires_at=at + 3600.0,
                    )
                    ledger.grant(lease, lease.owner_uid)
                    ledger.end([lease.ended(LeaseState.FREED, at + 30.0)], lease.owner_uid)
    finally:
        ledger.close()


def _read_forever(socket: str, reads: Synchronized[int]) -> None:
    """History (the most the API gives) and usage over all time, in turn, without a pause;
    `reads` counts the pairs of reads answered."""
    from gpulease import Client

    with Client(socket, timeout=600) as client:
        while True:
            client.history(limit=HISTORY_LIMIT)
            client.usage(since=0.0)
            with reads.get_lock():
                reads.value += 1


def _until_reading(reads: Synchronized[int], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while reads.value < 1:
        if time.monotonic() > deadline:
            raise RuntimeError("the reading client never got an answer")
        time.sleep(0.05)


def read_rows(leases: int = LEASES, seconds: float = SECONDS) -> list[tuple[str, str, str, str]]:
    """allocate(1)+free p50/p99 alone, then while a client reads as fast as it can."""
    with tempfile.TemporaryDirectory(prefix="gpuallocd-reads-") as tmp:
        root = Path(tmp)
        seed_ended_leases(root / "state", leases)
        with running_daemon(root) as daemon:
            socket = str(daemon.socket)
            run_bench(socket, clients=1, seconds=1.0)  # warm up
            alone = run_bench(socket, clients=1, seconds=seconds)
            spawn = multiprocessing.get_context("spawn")
            reads: Synchronized[int] = spawn.Value("i", 0)
            reader = spawn.Process(target=_read_forever, args=(socket, reads), daemon=True)
            reader.start()
            try:
                _until_reading(reads)  # measured only once the reader is answered
                before = reads.value
                loaded = run_bench(socket, clients=1, seconds=seconds)
                done = reads.value - before
            finally:
                reader.terminate()
                reader.join(10)
    what = f"allocate(1)+free, {leases} ended leases"
    return [
        (f"{what}, alone: p50 / p99", f"{alone.p50_ms:.3f} / {alone.p99_ms:.3f} ms", "", ""),
        (
            f"{what}, while a client reads history+usage: p50 / p99",
            f"{loaded.p50_ms:.3f} / {loaded.p99_ms:.3f} ms",
            f"max {loaded.max_ms:.1f} ms; {done} history+usage reads meanwhile",
            "goal: p99 within a few ms of alone",
        ),
    ]


if __name__ == "__main__":
    for row in read_rows():
        print("| " + " | ".join(row) + " |")
