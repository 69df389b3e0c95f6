"""A real daemon for the benchmarks: `python -m gpuallocd` in a temporary directory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpulease import Client, DaemonUnavailable

INVENTORY = "example:synthetic-32gpu"  # 32 GPUs: 32 clients leasing one each never collide


def wait_until_serving(socket: Path, process: subprocess.Popen[bytes]) -> None:
    """Return once `socket` answers a health check; raise if `process` dies first or 30 s pass."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with Client(socket, timeout=2) as client:
                client.health()
            return
        except DaemonUnavailable:
            if process.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@dataclass(frozen=True)
class RunningDaemon:
    socket: Path
    pid: int

    def cpu_seconds(self) -> float:
        """User + system CPU time the daemon has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def running_daemon(
    root: Path, *, sync: str = "full", environment: Mapping[str, str] | None = None
) -> Iterator[RunningDaemon]:
    """Serve a daemon on `root`/gpuallocd.sock with its ledger in `root`/state (and more
    settings in `environment`, as GPUALLOCD_ variables)."""
    socket = root / "gpuallocd.sock"
    environ = {
        **os.environ,
        "GPUALLOCD_SOCKET": str(socket),
        "GPUALLOCD_STATE_DIR": str(root / "state"),
        "GPUALLOCD_INVENTORY": INVENTORY,
        "GPUALLOCD_LEDGER_SYNC": sync,
        **(environment or {}),
    }
    # Its log (one line per grant and free, as in service) is written, to /dev/null, so the
    # table stays readable and the cost of logging is still measured.
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuallocd"], env=environ, stderr=subprocess.DEVNULL
    )
    try:
        wait_until_serving(socket, process)
        yield RunningDaemon(socket, process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
