"""Notices cost their own user alone: an end that writes its owner's notice, and one user's
feed read, with a feed of 0 and of 50,000 other notices; the timer's tick with 0 and 10,000
armed leases, none due; a grant's and an end's arming of the timer after 0 and 100,000
leases granted and freed at once, with the heap's size (docs/notifications.md).

`python -m benchmarks.notices` prints the rows alone (BENCH_NOTICES).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.daemon import INVENTORY
from gpuallocd.allocator.notices.ahead import Deadline, EndingAhead
from gpuallocd.inventory import open_inventory
from gpuallocd.ledger import Ledger
from gpuallocd.model import Lease, LeasedGpu, LeaseState
from gpuallocd.model.notice import DEFAULT_THRESHOLDS, EndingReason, Notice, NoticeKind

__all__ = ["notice_rows"]

NOTICES = int(os.environ.get("BENCH_NOTICES", "50000"))
ARMED = 10_000
CHURNED = 100_000
ROUNDS = 300
Row = tuple[str, str, str, str]


def _ledger(path: Path, others: int) -> Ledger:
    ledger = Ledger(path, sync="normal")
    ledger.sync_gpus(open_inventory(INVENTORY).topology().gpus, 0.0)
    with ledger.unit_of_work():
        for first in range(0, others, 1000):
            ledger.add_notices(
                [
                    Notice(2000 + n % 50, "u", NoticeKind.ENDED, f"k{n}", float(n), "t", "b")
                    for n in range(first, min(first + 1000, others))
                ]
            )
    return ledger


def _end_and_read_us(ledger: Ledger) -> tuple[float, float]:
    gpu = open_inventory(INVENTORY).topology().gpus[0]
    ends, reads = [], []
    for n in range(ROUNDS):
        lease = Lease(
            f"b{n:06d}",
            (LeasedGpu(gpu.uuid, gpu.index),),
            1000,
            "me",
            None,
            None,
            "simple",
            0.0,
            10.0,
        )
        ledger.grant(lease, 1000)
        started = time.perf_counter()
        ledger.end([lease.ended(LeaseState.EXPIRED, 10.0)], 0)
        ends.append(time.perf_counter() - started)
        started = time.perf_counter()
        ledger.notices_after(1000, 0, 100)
        reads.append(time.perf_counter() - started)
    return statistics.median(ends) * 1e6, statistics.median(reads) * 1e6


def _tick_us(armed: int) -> float:
    ahead = EndingAhead(lambda: 0.0)
    for n in range(armed):
        ahead.arm(f"l{n}", EndingReason.EXPIRY, Deadline(7200.0, 0.0, ""), DEFAULT_THRESHOLDS)
    started = time.perf_counter()
    for _ in range(10_000):
        ahead.due()
    return (time.perf_counter() - started) / 10_000 * 1e6


def _arm_and_disarm_us(churned: int) -> tuple[float, int]:
    """One lease's arm (its grant) and disarm (its end, at once) after `churned` leases did
    the same, and the heap's size then: a free must not leave its warnings behind."""
    ahead = EndingAhead(lambda: 0.0)
    deadline = Deadline(3600.0, 0.0, "")
    for n in range(churned):
        ahead.arm(f"c{n}", EndingReason.EXPIRY, deadline, DEFAULT_THRESHOLDS)
        ahead.disarm(f"c{n}")
    started = time.perf_counter()
    for n in range(10_000):
        ahead.arm(f"l{n}", EndingReason.EXPIRY, deadline, DEFAULT_THRESHOLDS)
        ahead.disarm(f"l{n}")
    return (time.perf_counter() - started) / 10_000 * 1e6, ahead.heap_size()


def notice_rows() -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="gpuallocd-bench-notices-") as tmp:
        small = _ledger(Path(tmp) / "small.sqlite3", 0)
        large = _ledger(Path(tmp) / "large.sqlite3", NOTICES)
        try:
            (end0, read0), (end1, read1) = _end_and_read_us(small), _end_and_read_us(large)
        finally:
            small.close()
            large.close()
    tick0, tick1 = _tick_us(0), _tick_us(ARMED)
    (arm0, heap0), (arm1, heap1) = _arm_and_disarm_us(0), _arm_and_disarm_us(CHURNED)
    return [
        (
            "notices: an expiry told to its owner",
            f"{end0:.0f} us",
            "",
            f"{end1:.0f} us beside {NOTICES} others' notices: x{end1 / end0:.2f}",
        ),
        (
            "notices: one user's feed read",
            f"{read0:.0f} us",
            "",
            f"{read1:.0f} us beside {NOTICES} others' notices: x{read1 / read0:.2f}",
        ),
        (
            "notices: the timer's tick, none due",
            f"{tick0:.2f} us",
            "",
            f"{tick1:.2f} us with {ARMED} leases armed: x{tick1 / tick0:.2f}",
        ),
        (
            "notices: a grant's and an end's arming of the timer",
            f"{arm0:.2f} us",
            f"heap {heap0}",
            f"{arm1:.2f} us after {CHURNED} leases freed at once: x{arm1 / arm0:.2f}; heap {heap1}",
        ),
    ]


if __name__ == "__main__":
    for row in notice_rows():
        print("| " + " | ".join(row) + " |")
