"""Work that leaves its parent stays under its lease.

A real user's `gpu_lease` holder starts work and exits at once, without freeing. However the
work leaves the holder (a fork and exit, a new session and a double fork, an exec of a shell,
a fan-out of twenty, a fork 1.5 s after the holder is gone), the lease covers it while it
runs and ends within two seconds of the work being killed. The daemon runs as the unit runs
it (its capability bounding set), so the process connector is what follows the work.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpulease import Client

from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.system_users import SystemUsers, open_to_everyone

PRELUDE = """
import os, sys, time, warnings
warnings.simplefilter("ignore")  # fork() beside the renewer thread
from gpulease import gpu_lease
WORK = sys.argv[1]

def quiet():
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)

def mark():
    open(os.path.join(WORK, str(os.getpid())), "w").close()

def work():
    quiet()
    mark()
    time.sleep(600)
    os._exit(0)

lease = gpu_lease(1, socket=sys.argv[2]).__enter__()
print(lease.id, flush=True)
"""

# name -> (what the holder does before it exits at once, processes of work left running)
CASES = {
    "fork-and-exit": ("if os.fork() == 0: work()\n", 1),
    "setsid-double-fork": (
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0: work()\n    os._exit(0)\n",
        1,
    ),
    "fork-exec-sh": (
        "if os.fork() == 0:\n"
        "    quiet(); mark()\n"
        "    os.execv('/bin/sh', ['sh', '-c', 'sleep 600; :'])\n",
        2,
    ),
    "fan-out-20": (
        "for _ in range(20):\n"
        "    if os.fork() == 0:\n"
        "        if os.fork() == 0: work()\n"
        "        os._exit(0)\n",
        20,
    ),
    "late-fork": (
        "if os.fork() == 0:\n"
        "    quiet(); time.sleep(1.5)\n"
        "    if os.fork() == 0: work()\n"
        "    os._exit(0)\n",
        1,
    ),
}


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


@pytest.fixture
def work_dir(paths: DaemonPaths) -> Iterator[Path]:
    """Where the work writes its pids; whatever of it still runs is killed at the end."""
    directory = paths.root / "work"
    directory.mkdir()
    directory.chmod(0o1777)
    yield directory
    for entry in directory.iterdir():
        if entry.name.isdigit() and alive(int(entry.name)):
            os.kill(int(entry.name), signal.SIGKILL)


@pytest.fixture
def node(
    system_users: SystemUsers, paths: DaemonPaths, unit_daemon: Callable[..., ProcessDaemon]
) -> ProcessDaemon:
    """A daemon with the unit's capabilities, its socket open to the test users."""
    open_to_everyone(paths.root)
    return unit_daemon()


def start_and_leave(users: SystemUsers, daemon: ProcessDaemon, work_dir: Path, body: str) -> str:
    """alice's holder takes a lease, runs `body` and exits at once: the lease's id."""
    script = PRELUDE + body + "os._exit(0)\n"
    holder = users.run("alice", ["-c", script, str(work_dir), str(daemon.paths.socket)])
    assert holder.returncode == 0, holder.stderr
    return holder.stdout.strip()


def marked(work_dir: Path) -> set[int]:
    return {int(entry.name) for entry in work_dir.iterdir() if entry.name.isdigit()}


def covered(client: Client, lease_id: str) -> set[int]:
    return set(client.lease(lease_id).raw["processes"])


def kill_and_time_the_end(client: Client, lease_id: str, pids: set[int]) -> float:
    """SIGKILL every pid; once the lease has ended (told by the daemon's event long poll),
    how long after the kill the daemon recorded its end."""
    killed_at = time.time()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    lease, seen = client.lease(lease_id), 0
    deadline = time.monotonic() + 60
    while lease.state == "active" and time.monotonic() < deadline:
        lease, events, _ = client.lease_events(lease_id, after=seen, wait=30)
        seen = max([seen, *(e["seq"] for e in events)])
    assert lease.state == "freed", lease.state
    assert lease.raw["ended_at"] is not None
    return float(lease.raw["ended_at"]) - killed_at


@pytest.mark.parametrize("case", sorted(CASES))
def test_work_that_leaves_its_holder_keeps_the_lease(
    case: str, node: ProcessDaemon, system_users: SystemUsers, work_dir: Path
) -> None:
    """The holder exits at once; the work it left keeps the lease until it is killed, and
    then the lease ends within two seconds."""
    body, processes = CASES[case]
    lease_id = start_and_leave(system_users, node, work_dir, body)
    expected = 1 if case == "fork-exec-sh" else processes
    wait_for(lambda: len(marked(work_dir)) == expected, timeout=30, what="the work to start")
    with Client(node.paths.socket) as client:
        wait_for(
            lambda: (
                marked(work_dir) <= covered(client, lease_id)
                and len(covered(client, lease_id)) == processes
            ),
            timeout=20,
            what=f"the lease to cover the work ({case})",
        )
        lease = client.lease(lease_id)
        assert lease.state == "active"
        assert all(alive(pid) for pid in covered(client, lease_id))
        took = kill_and_time_the_end(client, lease_id, covered(client, lease_id))
    assert took < 2.0
