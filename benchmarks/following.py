"""What following its work costs a lease's end (`processes/following.py`): the one look for the
owner's processes that carry the lease, made when its holder exits, beside 0 and
BENCH_OTHERS (default 5,000) idle processes of another user, with BENCH_CARRIERS (default 10)
processes of the owner's carrying the lease either way.

The look stats each /proc entry once (its owner is the kernel's mark on it) and reads files
only of the owner's processes started after the grant, so another user's processes cost a
stat each and nothing more; the rows give the look's p50 and p99 at both sizes and their
ratio. It runs once per lease whose holder exits, off the daemon's event loop; nothing of it
happens at a grant. Needs root (the owner is another user than the processes beside it).

`python -m benchmarks.following` prints the rows alone.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import statistics
import subprocess
import time
from collections.abc import Iterator

from gpuallocd.model import Lease, LeasedGpu
from gpuallocd.processes.following import carriers

__all__ = ["following_rows"]

OTHERS = int(os.environ.get("BENCH_OTHERS", "5000"))
CARRIERS = int(os.environ.get("BENCH_CARRIERS", "10"))
LOOKS = int(os.environ.get("BENCH_LOOKS", "20"))
OWNER = "nobody"
LEASE_ID = "f011011f0110"

Row = tuple[str, str, str, str]


@contextlib.contextmanager
def _sleeping(
    count: int, uid: int | None = None, env: dict[str, str] | None = None
) -> Iterator[None]:
    """`count` idle processes (as `uid` where given), stopped at the end."""
    started = [
        subprocess.Popen(["sleep", "3600"], user=uid, env=env or {}, start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for process in started:
            process.kill()
        for process in started:
            process.wait()


def _lease(uid: int) -> Lease:
    now = time.time()
    return Lease(LEASE_ID, (LeasedGpu("GPU-0", 0),), uid, OWNER, None, None, "simple", now,
                 now + 3600, bound=True, pid_start_time=0, follow_work=True)  # fmt: skip


def _looks(lease: Lease) -> tuple[list[float], int]:
    took, found = [], 0
    for _ in range(LOOKS):
        started = time.perf_counter()
        found = len(carriers(lease))
        took.append((time.perf_counter() - started) * 1e3)
    return took, found


def following_rows() -> list[Row]:
    if os.geteuid() != 0:
        return [("following: the look at a holder's exit", "skipped", "", "needs root")]
    uid = pwd.getpwnam(OWNER).pw_uid
    lease = _lease(uid)
    time.sleep(0.05)  # the carriers start after the grant
    rows: list[Row] = []
    with _sleeping(CARRIERS, uid, {"GPUALLOCD_LEASE_ID": LEASE_ID}):
        alone, found = _looks(lease)
        with _sleeping(OTHERS):
            beside, found_beside = _looks(lease)
    base = statistics.median(alone)
    for size, took, got in ((0, alone, found), (OTHERS, beside, found_beside)):
        p50, p99 = statistics.median(took), sorted(took)[min(len(took) - 1, len(took) * 99 // 100)]
        note = f"{got} of {CARRIERS} carriers found; {len(took)} looks"
        if size:
            note = f"{p50 / base:.2f}x the p50 beside none; " + note
        rows.append(
            (f"following: the look at a holder's exit, beside {size:,} processes of another user",
             f"{p50:.2f} / {p99:.2f} ms", "", note)
        )  # fmt: skip
    return rows


if __name__ == "__main__":
    for row in following_rows():
        print("| " + " | ".join(row) + " |", flush=True)
