"""Work that leaves its parent stays under its lease.

A real user's `gpu_lease` holder starts work and exits at once, without freeing. However the
work leaves the holder (a fork and exit, a new session and a double fork, an exec of a shell,
a fan-out of twenty, a fork 1.5 s after the holder is gone), the lease covers it while it
runs and ends within two seconds of the work being killed. The daemon runs as the unit runs
it (its capability bounding set), so the process connector is what follows the work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpulease import Client

from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.lease_work import (
    alive,
    covered,
    kill_and_time_the_end,
    kill_marked,
    marked,
    prepare_work_dir,
    start_and_leave,
)
from tests.system_users import SystemUsers, open_to_everyone

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


@pytest.fixture
def work_dir(paths: DaemonPaths) -> Iterator[Path]:
    """Where the work writes its pids; whatever of it still runs is killed at the end."""
    directory = prepare_work_dir(paths.root)
    yield directory
    kill_marked(directory)


@pytest.fixture
def node(
    system_users: SystemUsers, paths: DaemonPaths, unit_daemon: Callable[..., ProcessDaemon]
) -> ProcessDaemon:
    """A daemon with the unit's capabilities, its socket open to the test users."""
    open_to_everyone(paths.root)
    return unit_daemon()


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
