"""Process tracking under load: forks inside leased families beside many unrelated processes.

FAMILIES holders each take a bound lease (`gpu_lease`) and fork children that exit at once,
BENCH_FORKS per second in all (default 1,000), for BENCH_TRACKING_SECONDS (default 10),
while BENCH_UNRELATED idle processes (default 10,000 `sleep`s) run beside them. For each
mode the daemon's CPU (user + system, share of one core) is measured over the load (and for
IDLE_SECONDS before it, at rest, every process already running), and in
`connector` mode the daemon's own count of forks covered and its fork-to-covered latency
(from the kernel's fork event to the child being a member, p50 and p99) from its
diagnostics. In `proc-scan` mode a child that exits before the next scan is never seen; for
one that lives on, the time until the lease lists it is measured from outside (polled).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpulease import Client, DaemonUnavailable

from benchmarks.daemon import RunningDaemon, running_daemon
from gpuallocd.model import Lease
from gpuallocd.processes import ProcessFamilies
from gpuallocd.processes.connector import Connector, ConnectorUnavailable, EventKind, ProcEvent
from gpuallocd.processes.events import FamilyEvents

__all__ = ["process_tracking_rows"]

FORKS_PER_SECOND = float(os.environ.get("BENCH_FORKS", "1000"))
UNRELATED = int(os.environ.get("BENCH_UNRELATED", "10000"))
LOAD_SECONDS = float(os.environ.get("BENCH_TRACKING_SECONDS", "10"))
FAMILIES = 4
IDLE_SECONDS = 5.0  # the same daemon, leases held, nobody forking: its CPU at rest

Row = tuple[str, str, str, str]

FORKER = """
import os, signal, sys, time
from gpulease import gpu_lease
rate, seconds = float(sys.argv[2]), float(sys.argv[3])
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel
with gpu_lease(1, socket=sys.argv[1]):
    print("ready", flush=True)
    sys.stdin.readline()
    made, started = 0, time.monotonic()
    while (now := time.monotonic() - started) < seconds:
        if made < now * rate:
            if os.fork() == 0:
                os._exit(0)
            made += 1
        else:
            time.sleep(0.0005)
    print(made, flush=True)
"""


@contextlib.contextmanager
def unrelated_processes(count: int) -> Iterator[int]:
    """`count` idle processes in a session of their own (killed together at the end); how
    many run."""
    shell = subprocess.Popen(
        [
            "sh",
            "-c",
            f"i=0; while [ $i -lt {count} ]; do sleep 3600 & i=$((i+1)); done; echo; wait",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert shell.stdout is not None
        shell.stdout.readline()
        yield count
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()


def _forkers(socket: Path, rate: float) -> list[subprocess.Popen[str]]:
    forkers = [
        subprocess.Popen(
            [sys.executable, "-c", FORKER, str(socket), str(rate), str(LOAD_SECONDS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(FAMILIES)
    ]
    for forker in forkers:
        assert forker.stdout is not None and forker.stdout.readline().strip() == "ready"
    return forkers


def _tracking(socket: Path) -> dict[str, Any]:
    with Client(socket) as client:
        detail: dict[str, Any] = client.request("GET", "/v1/diagnostics")["process_tracking_detail"]
    return detail


def _measure(daemon: RunningDaemon) -> dict[str, Any]:
    """Run the load once; the daemon's CPU share, forks made, and its tracking numbers."""
    forkers = _forkers(daemon.socket, FORKS_PER_SECOND / FAMILIES)
    idle_before, idle_started = daemon.cpu_seconds(), time.monotonic()
    time.sleep(IDLE_SECONDS)
    idle = (daemon.cpu_seconds() - idle_before) / (time.monotonic() - idle_started)
    before, cpu_before = _tracking(daemon.socket), daemon.cpu_seconds()
    started = time.monotonic()
    for forker in forkers:
        assert forker.stdin is not None
        forker.stdin.write("go\n")
        forker.stdin.flush()
    made = 0
    for forker in forkers:
        out, _ = forker.communicate(timeout=LOAD_SECONDS + 60)
        made += int(out.split()[-1])
    elapsed = time.monotonic() - started
    after = _tracking(daemon.socket)
    return {
        "idle_cpu": idle,
        "cpu": (daemon.cpu_seconds() - cpu_before) / elapsed,
        "made": made,
        "rate": made / elapsed,
        "covered": after.get("forks_covered", 0) - before.get("forks_covered", 0),
        **after,
    }


def _rows(mode: str, found: dict[str, Any], unrelated: int) -> list[Row]:
    where = f"{mode}, {found['rate']:.0f} forks/s in {FAMILIES} leases, {unrelated} others"
    rest = f"{found['idle_cpu'] * 100:.1f} % with no fork in the leases"
    rows: list[Row] = [
        (f"daemon CPU, {where}", f"{found['cpu'] * 100:.1f} %", "", f"of one core; {rest}"),
    ]
    if mode == "connector":
        covered = f"{found['covered']} of {found['made']} forks covered"
        rows += [
            (
                "fork to covered p50, connector",
                f"{found['fork_to_covered_p50_ms']:.3f} ms",
                "",
                covered,
            ),
            ("fork to covered p99, connector", f"{found['fork_to_covered_p99_ms']:.3f} ms", "", ""),
            ("event overruns (full /proc rescans), connector", str(found["overruns"]), "", ""),
        ]
    else:
        seen = found["seen_ms"]
        note = "a child that lives on; one exiting sooner escapes"
        rows += [
            ("fork to covered p50, proc-scan", f"{seen[len(seen) // 2]:.0f} ms", "", note),
            ("fork to covered max, proc-scan", f"{seen[-1]:.0f} ms", "", f"{len(seen)} samples"),
        ]
    return rows


def process_tracking_rows() -> Iterator[Row]:
    """The rows of each mode, as soon as it is measured."""
    yield from _apply_cost_rows()
    with (
        tempfile.TemporaryDirectory(prefix="gpuallocd-bench-") as tmp,
        unrelated_processes(UNRELATED) as unrelated,
    ):
        for mode in ("connector", "proc-scan"):
            root = Path(tmp) / mode
            root.mkdir()
            try:
                yield from _mode_rows(root, mode, unrelated)
            except DaemonUnavailable:
                yield (f"process tracking, {mode}", "unavailable", "", "needs root here")


def _mode_rows(root: Path, mode: str, unrelated: int) -> list[Row]:
    settings = {"GPUALLOCD_PROCESS_TRACKING": mode}
    with running_daemon(root, environment=settings) as daemon:
        found = _measure(daemon)
        if mode == "proc-scan":
            found["seen_ms"] = _seen_from_outside(daemon.socket)
    return _rows(mode, found, unrelated)


def _apply_cost_rows(unrelated: int = 100_000, covered: int = 10_000) -> Iterator[Row]:
    """What applying one event costs the daemon's loop, measured in this process on the same
    code: events of processes outside every lease, and a fork and exit inside one (the
    child's start time read from /proc)."""
    try:
        connector = Connector.open()
    except ConnectorUnavailable as exc:
        yield ("event handling cost", "unavailable", "", str(exc))
        return
    me = os.getpid()
    lease = Lease("L", (), 0, "root", me, None, "simple", 0.0, 0.0, bound=True, pid_start_time=0)
    families = ProcessFamilies()
    families.track(lease)
    events = FamilyEvents(connector, families, lambda gone: None, list)
    strangers = [
        ProcEvent(kind, 2**24 + i, 2**24 + i, 1, 0)  # above any pid_max
        for i in range(unrelated // 2)
        for kind in (EventKind.FORK, EventKind.EXIT)
    ]
    started = time.perf_counter()
    events.apply(strangers)
    per_stranger = (time.perf_counter() - started) / len(strangers) * 1e6
    child = subprocess.Popen(["sleep", "60"])
    ours = [
        ProcEvent(EventKind.FORK, child.pid, child.pid, me, 0),
        ProcEvent(EventKind.EXIT, child.pid, child.pid),
    ]
    started = time.perf_counter()
    for _ in range(covered):
        events.apply(ours)
    per_fork = (time.perf_counter() - started) / covered * 1e6
    child.kill()
    child.wait()
    connector.close()
    yield (
        "event of a process outside every lease",
        f"{per_stranger:.2f} us",
        "",
        "loop time per event",
    )
    yield ("fork + exit inside a lease", f"{per_fork:.1f} us", "", "loop time, /proc read included")


def _seen_from_outside(socket: Path, samples: int = 10, limit: float = 20) -> list[float]:
    """How long until the lease lists a child that lives on (polled every 5 ms), in ms;
    `limit` seconds where it never does."""
    found = []
    with Client(socket) as client:
        lease = client.allocate(1, bind_to_process=True)
        for _ in range(samples):
            forked = time.monotonic()
            child = os.fork()
            if child == 0:
                time.sleep(limit + 30)
                os._exit(0)
            while child not in client.lease(lease.id).raw["processes"]:
                if time.monotonic() - forked > limit:
                    break
                time.sleep(0.005)
            found.append((time.monotonic() - forked) * 1e3)
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        client.free(lease.id)
    return sorted(found)


if __name__ == "__main__":
    for row in process_tracking_rows():
        print("| " + " | ".join(row) + " |", flush=True)
