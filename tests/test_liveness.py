"""Leases that die with their process, and survive what they should."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from gpulease import Client, gpu_lease

from gpuallocd.host.proc import process_start_time
from tests.harness import ProcessDaemon, ThreadDaemon, ctl_argv, wait_for

HOLDER = """
import sys, time
from gpulease import gpu_lease
with gpu_lease(int(sys.argv[2]), socket=sys.argv[1]) as lease:
    print(lease.id, flush=True)
    time.sleep(300)
"""


def start_holder(socket: Path, count: int = 1) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(socket), str(count)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lease_id = proc.stdout.readline().strip()
    assert lease_id, "the holder did not get a lease"
    return proc, lease_id


def wait_for_state(client: Client, lease_id: str, state: str, limit: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if client.lease(lease_id).state == state:
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"lease {lease_id} is {client.lease(lease_id).state}, not {state}")


def test_start_time_reads_this_process() -> None:
    """The start time of a live process is a number; of a dead pid, None."""
    assert isinstance(process_start_time(os.getpid()), int)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert process_start_time(proc.pid) is None


def test_start_time_of_a_zombie_is_none() -> None:
    """An exited but unreaped process counts as gone."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while process_start_time(proc.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process_start_time(proc.pid) is None
    proc.wait()


def test_lease_of_a_killed_process_is_freed_within_two_seconds(daemon: ThreadDaemon) -> None:
    """kill -9 of the holder: its bound lease ends within 2 s and the GPU is free again."""
    proc, lease_id = start_holder(daemon.paths.socket, 2)
    with daemon.client() as client:
        lease = client.lease(lease_id)
        assert lease.raw["bound_to_process"] and lease.pid == proc.pid
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        took = wait_for_state(client, lease_id, "freed", 2.0)
        assert took < 2.0
        assert client.leases() == []
        last = client.history(lease_id)[-1]
    assert last["event"] == "freed" and "exited" in last["detail"]


def test_detached_lease_outlives_its_requester(daemon: ThreadDaemon) -> None:
    """A lease taken without binding (gpuallocctl allocate) lives on after the CLI exits."""
    out = subprocess.run(
        ctl_argv(daemon.paths.socket, "--json", "allocate", "-n", "1"),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    import json

    lease_id = json.loads(out.stdout)["id"]
    time.sleep(1.5)
    with daemon.client() as client:
        assert client.lease(lease_id).state == "active"


def test_one_process_with_several_leases(daemon: ThreadDaemon) -> None:
    """Every bound lease of a dead process ends, not just the first."""
    script = (
        "import sys, time\n"
        "from gpulease import Client\n"
        "c = Client(sys.argv[1])\n"
        "ids = [c.allocate(1, bind_to_process=True).id for _ in range(3)]\n"
        "print(' '.join(ids), flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(daemon.paths.socket)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    ids = proc.stdout.readline().split()
    proc.kill()
    proc.communicate()
    with daemon.client() as client:
        for lease_id in ids:
            wait_for_state(client, lease_id, "freed", 2.0)


def test_leases_of_processes_that_died_while_the_daemon_was_down_are_freed(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """On restart the daemon frees bound leases whose process is gone, keeps the others."""
    daemon = process_daemon()
    dying, dying_id = start_holder(daemon.paths.socket)
    living, living_id = start_holder(daemon.paths.socket)
    try:
        daemon.kill()
        dying.kill()
        dying.communicate()
        restarted = process_daemon()
        with restarted.client() as client:
            assert client.lease(dying_id).state == "freed"
            assert client.lease(living_id).state == "active"
            living.kill()
            living.communicate()
            wait_for_state(client, living_id, "freed", 2.0)
    finally:
        for proc in (dying, living):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_renewals_survive_a_daemon_restart(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """The renew thread rides out a restart: the lease is still active and renewed after.

    No step races a deadline: the TTL (30 s, renewed every 10 s, retried every second while
    the daemon is down) outlasts a restart many times over, and the test waits for the
    renewal it expects rather than sleeping for a guessed time.
    """
    daemon = process_daemon()
    with gpu_lease(1, ttl=30, socket=daemon.paths.socket) as lease:
        daemon.stop()
        restarted = process_daemon()
        with restarted.client() as client:
            renewed_before = _renewals(client, lease.id)
            wait_for(lambda: _renewals(client, lease.id) > renewed_before, timeout=60)
            assert client.lease(lease.id).state == "active"
    with restarted.client() as client:
        assert client.lease(lease.id).state == "freed"


def _renewals(client: Client, lease_id: str) -> int:
    return sum(1 for event in client.history(lease_id) if event["event"] == "renewed")


@pytest.mark.parametrize("visible", ["uuid", "index"])
def test_run_binds_its_lease(daemon: ThreadDaemon, visible: str) -> None:
    """gpuallocctl run's lease follows the work: killing gpuallocctl leaves it with the command
    still running on the GPUs, and the command's exit frees the GPUs."""
    proc = subprocess.Popen(
        ctl_argv(daemon.paths.socket, "run", "-n", "1", "--visible", visible, "--", "sleep", "300"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    with daemon.client() as client:
        wait_for(lambda: bool(client.leases()), timeout=20)
        (lease,) = client.leases()
        assert lease.pid == proc.pid and lease.raw["bound_to_process"]

        def command_pids() -> list[int]:
            return [p for p in client.lease(lease.id).raw["processes"] if p != proc.pid]

        wait_for(lambda: bool(command_pids()), timeout=20)
        (command,) = command_pids()
        proc.kill()
        proc.wait()
        assert client.lease(lease.id).state == "active"  # `sleep` still runs on the GPU
        os.kill(command, signal.SIGKILL)
        wait_for_state(client, lease.id, "freed", 20.0)
