"""A busy node for the dashboard's tests: four days of leases by two real users (one of
them waiting for the other, then granted), leases held now, and a request in the queue.

The daemon runs on a clock the scene moves by hand, so the history spans days in a second.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.harness import DaemonPaths, HandClock, ThreadDaemon, wait_for
from tests.local_users import LocalUser, run_as

HOUR = 3600.0
DAY = 24 * HOUR
ALLOCATE = """
import sys
from gpulease import Client
gpus = [int(g) for g in sys.argv[1].split(",")]
lease = Client().allocate(gpus=gpus, label=sys.argv[2], ttl=float(sys.argv[3]), wait=True)
print(lease.id, flush=True)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Scene:
    daemon: ThreadDaemon
    clock: HandClock
    url: str
    ana: LocalUser
    ben: LocalUser
    waiting: subprocess.Popen[str]  # ben, waiting for GPU 0 (ana's)


def _start_as(
    user: LocalUser, daemon: ThreadDaemon, gpus: str, label: str
) -> subprocess.Popen[str]:
    return run_as(user, ALLOCATE, daemon.paths.socket, gpus, label, str(8 * HOUR))


def _lease_id(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    return out.strip()


def _queued(daemon: ThreadDaemon, count: int) -> None:
    with daemon.client() as client:
        wait_for(lambda: len(client.queue()) == count, timeout=20)


def _one_day(scene_daemon: ThreadDaemon, clock: HandClock, ana: LocalUser, ben: LocalUser) -> None:
    """ana holds GPUs 0 and 1 for 2 h while ben waits for GPU 0; ben then holds it 3 h;
    root revokes both."""
    mine = _lease_id(_start_as(ana, scene_daemon, "0,1", "llm-pretrain"))
    waiting = _start_as(ben, scene_daemon, "0", "eval-sweep")
    _queued(scene_daemon, 1)
    clock.step(2 * HOUR)
    with scene_daemon.client() as root:
        root.revoke(mine, reason="time is up")
        theirs = _lease_id(waiting)
        clock.step(3 * HOUR)
        root.revoke(theirs, reason="done for the day")


@contextmanager
def busy_node(ana: LocalUser, ben: LocalUser, days: int = 3) -> Iterator[Scene]:
    """The node after `days` such days: ana holds GPUs 0 and 1 now, ben waits for GPU 0,
    and GPU 3 is reserved for ben tomorrow."""
    root_dir = Path(tempfile.mkdtemp(prefix="gd-", dir="/tmp"))
    root_dir.chmod(0o755)
    clock = HandClock(time.time() - days * DAY)
    port = free_port()
    daemon = ThreadDaemon(
        DaemonPaths(root_dir),
        clock=clock,
        default_policy="simple",
        dashboard_listen=f"127.0.0.1:{port}",
    ).start()
    waiting: subprocess.Popen[str] | None = None
    try:
        for _ in range(days):
            _one_day(daemon, clock, ana, ben)
            clock.step(DAY - 5 * HOUR)
        _lease_id(_start_as(ana, daemon, "0,1", "llm-pretrain"))
        waiting = _start_as(ben, daemon, "0", "eval-sweep")
        _queued(daemon, 1)
        with daemon.client() as admin:  # a demo tomorrow: GPU 3 held for ben for two hours
            admin.reserve(
                gpus=[3],
                start_in=20 * HOUR,
                duration=2 * HOUR,
                user=ben.name,
                reason="demo for the review",
            )
        clock.step(20 * 60)
        yield Scene(daemon, clock, f"http://127.0.0.1:{port}", ana, ben, waiting)
    finally:
        if waiting is not None:  # killed if still waiting; its pipes closed either way
            if waiting.poll() is None:
                waiting.kill()
            waiting.communicate(timeout=10)
        daemon.stop()
        shutil.rmtree(root_dir, ignore_errors=True)
