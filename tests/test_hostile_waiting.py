"""Case 3: a wait that only its owner's own leases block is refused; reservations show."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest
from gpulease import GpusUnavailable

from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.local_users import LocalUser, run_as

SELF_BLOCK_SCRIPT = """
import gpulease
with gpulease.Client(timeout=20) as client:
    client.allocate(1)
    try:
        client.allocate(4, wait=True, timeout=600)
    except gpulease.GpuallocError as error:
        print(error.code, flush=True)
"""

WAIT_SCRIPT = """
import gpulease
with gpulease.Client() as client:
    lease = client.allocate(3, wait=True)
    print(lease.id, flush=True)
"""


def test_holding_one_gpu_and_waiting_for_all_is_refused_at_once(
    users: tuple[LocalUser, LocalUser],
    open_paths: DaemonPaths,
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """A user who holds 1 GPU and waits for all 4 gets would_wait_forever; the others stay
    free for everyone."""
    ana, _ = users
    daemon = start_daemon(default_policy="simple")
    process = run_as(ana, SELF_BLOCK_SCRIPT, open_paths.socket)
    out, err = process.communicate(timeout=60)
    assert out.strip() == "would_wait_forever", err
    with daemon.client() as client:
        assert client.queue() == []
        assert [gpu.state for gpu in client.status()].count("free") == 3
        assert len(client.allocate(3).gpus) == 3


def test_status_shows_reserved_gpus_and_who_waits(
    users: tuple[LocalUser, LocalUser],
    open_paths: DaemonPaths,
    start_daemon: Callable[..., ThreadDaemon],
    user_processes: list[subprocess.Popen[str]],
) -> None:
    """Free GPUs held for a waiter are `reserved` with the waiter's user, and not granted."""
    ana, _ = users
    daemon = start_daemon(default_policy="simple")
    with daemon.client() as client:
        holder = client.allocate(2)
        waiter = run_as(ana, WAIT_SCRIPT, open_paths.socket)
        user_processes.append(waiter)
        wait_for(lambda: len(client.queue()) == 1, timeout=20)
        reserved = [g.raw for g in client.status() if g.state == "reserved"]
        assert len(reserved) == 2
        assert {g["reserved_for"]["user"] for g in reserved} == {ana.name}
        with pytest.raises(GpusUnavailable):
            client.allocate(1)
        client.free(holder.id)
        _, err = waiter.communicate(timeout=30)
        assert waiter.returncode == 0, err
        assert [lease.user for lease in client.leases()] == [ana.name]
