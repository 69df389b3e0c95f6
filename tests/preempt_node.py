"""A node for the preemption tests: a real daemon on hand clocks (restartable), real users'
commands and jobs against it, and reads of what the daemon and the ledger say.

The daemon's clock moves only when the test steps it, so the minimum runtime, the lead and
the grace pass exactly when a test says; the processes run in real time, and every wait on
them is a `wait_for` with a generous bound, never a sleep raced against a deadline.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

from gpulease import Client

from gpuallocd.daemon.config.loading import load_config
from tests.harness import DaemonPaths, HandClock, ThreadDaemon, wait_for
from tests.lease_work import alive
from tests.system_users import SystemUsers, open_to_everyone

START = 1_800_000_000.0
MINUTE = 60.0
HOUR = 3600.0
JOB = str(Path(__file__).resolve().parent / "preempt_job.py")
TERMS = {
    "preempt_min_runtime_seconds": 30 * MINUTE,
    "preempt_lead_seconds": MINUTE,
    "preempt_grace_seconds": 5 * MINUTE,
}


class Node:
    """A daemon on hand clocks and the processes started as its users."""

    def __init__(self, root: Path, users: SystemUsers, config: str = "", **settings: Any) -> None:
        """`config`: the text of a config file (its `[limits]`), the settings beside it."""
        open_to_everyone(root)
        self.root, self.users, self.config = root, users, config
        self.paths = DaemonPaths(root)
        self.wall, self.boot = HandClock(START), HandClock(9000.0)
        self.settings = {"default_policy": "simple", **TERMS, **settings}
        self.daemon = self._start()
        self.work = root / "work"
        self.work.mkdir()
        self.work.chmod(0o1777)
        self.started: list[subprocess.Popen[str]] = []

    def _start(self) -> ThreadDaemon:
        daemon = ThreadDaemon(self.paths, clock=self.wall, monotonic=self.boot, **self.settings)
        if self.config:
            path = self.root / "gpuallocd.toml"
            path.write_text(self.config)
            daemon.config = load_config(
                path,
                environ={},
                socket=str(self.paths.socket),
                state_dir=str(self.paths.state_dir),
                inventory=daemon.config.inventory,
                **self.settings,
            )
        return daemon.start()

    def restart(self) -> None:
        self.daemon.stop()
        self.daemon = self._start()

    def step(self, seconds: float) -> None:
        self.wall.step(seconds)
        self.boot.step(seconds)

    @property
    def socket(self) -> str:
        return str(self.paths.socket)

    def client(self) -> Client:
        return Client(self.paths.socket)

    def ctl(self, short: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """`gpuallocctl ARGS` as the user, waited for."""
        return self.users.ctl(short, self.paths.socket, *args, timeout=timeout)

    def start_ctl(self, short: str, name: str, *args: str) -> subprocess.Popen[str]:
        """`gpuallocctl ARGS` as the user in the background, its output in `work/NAME.log`."""
        argv = ["-m", "gpuallocd.cli", "--socket", self.socket, *args]
        return self._keep(self.users.start(short, argv, self.work / f"{name}.log"))

    def start_python(self, short: str, name: str, *argv: str) -> subprocess.Popen[str]:
        """`python ARGV` as the user in the background, its output in `work/NAME.log`."""
        return self._keep(self.users.start(short, list(argv), self.work / f"{name}.log"))

    def start_holder(self, short: str, mode: str, name: str, count: int = 1) -> Path:
        """A `gpu_lease(preemptible=True)` holder as the user (tests/preempt_job.py `hold`)."""
        log = self.work / f"{name}.events"
        log.touch()
        log.chmod(0o666)
        argv = [JOB, "hold", mode, str(log), self.socket, str(count)]
        self._keep(self.users.start(short, argv, self.work / f"{name}.log"))
        wait_for(
            lambda: "holder" in log.read_text() and "worker" in log.read_text(),
            30,
            what=f"{name}'s lease and its worker",
        )
        return log

    def _keep(self, process: subprocess.Popen[str]) -> subprocess.Popen[str]:
        self.started.append(process)
        return process

    def log(self, name: str) -> str:
        return (self.work / f"{name}.log").read_text()

    def history(self, lease_id: str) -> list[tuple[str, str | None]]:
        with self.client() as client:
            return [(e["event"], e["detail"]) for e in client.history(lease_id, limit=1000)]

    def events(self, lease_id: str) -> list[str]:
        return [event for event, _ in self.history(lease_id)]

    def lease(self, lease_id: str) -> dict[str, Any]:
        with self.client() as client:
            found: dict[str, Any] = client.request("GET", f"/v1/leases/{lease_id}")
            return found

    def until_event(self, lease_id: str, event: str, timeout: float = 30) -> None:
        wait_for(lambda: event in self.events(lease_id), timeout, what=f"{event} of {lease_id}")

    def close(self) -> None:
        for process in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait(20)
        self.daemon.stop()


def holder_pids(log: Path) -> tuple[str, int, int]:
    """The lease id, the holder's pid and its worker's pid, as the holder logged them."""
    lines = log.read_text().splitlines()
    lease, holder = next(line.split()[1::2] for line in lines if line.startswith("lease "))
    worker = next(int(line.split()[1]) for line in lines if line.startswith("worker "))
    return lease, int(holder), worker


def overlapping_leases(ledger: Path) -> list[tuple[str, str, str]]:
    """Pairs of leases that held one unit at once, read from the ledger itself: none, where
    nothing was double-booked."""
    with closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as conn, conn:
        rows = conn.execute(
            "SELECT g.gpu_uuid, l.id, l.created_at, coalesce(l.ended_at, 1e18) "
            "FROM lease_gpus g JOIN leases l ON l.id = g.lease_id WHERE g.kind != 'share'"
        ).fetchall()
    found = []
    for gpu, lease, start, end in rows:
        for other_gpu, other, other_start, other_end in rows:
            if gpu == other_gpu and lease < other and start < other_end and other_start < end:
                found.append((gpu, lease, other))
    return found


def gone(pid: int) -> bool:
    return not alive(pid)


def kill_quietly(pid: int) -> None:
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
