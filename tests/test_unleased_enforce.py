"""`unleased_use = "terminate"` and `"adopt"`: after the grace the process is stopped
(SIGTERM, then SIGKILL), never root's; on a free GPU it becomes its owner's lease, within
the owner's limits. Real users and processes; time moved by the test's clock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.rules_harness import SteppedClock, daemon_with_config
from tests.system_users import SystemUsers
from tests.unleased_helpers import SLEEPER, STUBBORN, Node, alive, node

__all__ = ["node"]

UUID2 = "GPU-bb6adf39-2180-59fa-a20c-689582edf774"
UUID3 = "GPU-f06d330d-af21-5a36-84a7-d3d20d41fb7f"
UUID7 = "GPU-495f5088-1f28-519e-b665-7c23402fd3b3"
MIG_GI2 = "MIG-9aaf1f46-ef8b-5527-b7bb-e6ccd72621c1"


def start(
    paths: DaemonPaths, node: Node, config: str = "", **settings: Any
) -> tuple[ThreadDaemon, SteppedClock]:
    clock = SteppedClock()
    settings.setdefault("sample_interval_seconds", 0.1)
    daemon = daemon_with_config(paths, config, clock=clock, inventory=node.inventory, **settings)
    return daemon.start(), clock


def actions(daemon: ThreadDaemon, pid: int) -> list[str]:
    with daemon.client() as client:
        return [e["action"] for e in client.unleased()["events"] if e["pid"] == pid]


def test_terminate_waits_for_the_grace_then_stops_the_process(
    paths: DaemonPaths, node: Node
) -> None:
    """Reported at once, alive through the grace (60 s), SIGTERM once it has passed."""
    daemon, clock = start(paths, node, unleased_use="terminate", unleased_grace_seconds=60.0)
    pid = node.start("bob")
    node.put(UUID3, pid)
    wait_for(lambda: actions(daemon, pid) == ["reported"], timeout=30, what="the report")
    clock.advance(59)
    with daemon.client() as client:
        node.sampled(client)
    assert alive(pid) and actions(daemon, pid) == ["reported"]
    clock.advance(2)
    wait_for(lambda: not alive(pid), timeout=30, what="the process to stop")
    assert actions(daemon, pid) == ["reported", "terminated"]


def test_a_process_that_ignores_sigterm_gets_sigkill(paths: DaemonPaths, node: Node) -> None:
    """SIGTERM ignored: SIGKILL `revoke_grace_seconds` later, recorded as `killed`."""
    daemon, clock = start(
        paths, node, unleased_use="terminate", unleased_grace_seconds=0.0, revoke_grace_seconds=30
    )
    pid = node.start("bob", STUBBORN)
    node.put(UUID3, pid)
    wait_for(lambda: "terminated" in actions(daemon, pid), timeout=30, what="SIGTERM")
    with daemon.client() as client:
        node.sampled(client)
    assert alive(pid)
    clock.advance(31)
    wait_for(lambda: not alive(pid), timeout=30, what="SIGKILL")
    assert actions(daemon, pid) == ["reported", "terminated", "killed"]


def test_roots_processes_are_reported_never_signalled(paths: DaemonPaths, node: Node) -> None:
    """A root process on a GPU without a lease is reported, and left running."""
    daemon, _ = start(paths, node, unleased_use="terminate", unleased_grace_seconds=0.0)
    root = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout is not None and root.stdout.readline().strip() == "ready"
        node.put(UUID3, root.pid)
        wait_for(lambda: actions(daemon, root.pid) == ["reported"], timeout=30, what="report")
        with daemon.client() as client:
            node.sampled(client)
        assert root.poll() is None and actions(daemon, root.pid) == ["reported"]
    finally:
        root.kill()
        root.wait(10)
        assert root.stdout is not None
        root.stdout.close()


def test_adopt_makes_a_lease_of_the_owner_bound_to_the_process(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """bob's process on free GPU 2 becomes bob's lease, bound to it: `granted` then
    `adopted` in its history, in `leases`; when the process ends, so does the lease."""
    daemon, _ = start(paths, node, unleased_use="adopt")
    pid = node.start("bob")
    node.put(UUID2, pid)
    with daemon.client() as client:
        wait_for(lambda: len(client.leases()) == 1, timeout=30, what="the adoption")
        (lease,) = client.leases()
        assert (lease.user, lease.pid, lease.uuids) == (system_users.name("bob"), pid, (UUID2,))
        events = [e["event"] for e in client.history(lease.id)]
        assert events == ["granted", "adopted"]
        assert actions(daemon, pid) == ["adopted"]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: client.lease(lease.id).state == "freed", timeout=30, what="the end")


def test_adopt_over_a_limit_is_reported(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """bob may hold 1 GPU: his first process is adopted, his second (another GPU) is
    reported with the limit, and keeps running (`unleased_over_limit = "report"`)."""
    config = f"[limits.user.{system_users.name('bob')}]\nmax_gpus = 1\n"
    daemon, _ = start(paths, node, config, unleased_use="adopt")
    first, second = node.start("bob"), node.start("bob")
    node.put(UUID2, first)
    with daemon.client() as client:
        wait_for(lambda: len(client.leases()) == 1, timeout=30, what="the first adoption")
    node.put(UUID3, second)
    wait_for(lambda: actions(daemon, second) == ["reported"], timeout=30, what="the report")
    with daemon.client() as client:
        (record,) = [e for e in client.unleased()["events"] if e["pid"] == second]
        assert "not adopted" in record["detail"] and "max_gpus = 1" in record["detail"]
        assert len(client.leases()) == 1
    assert alive(second)


def test_adopt_over_a_limit_is_terminated_where_the_site_says(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """With `unleased_over_limit = "terminate"`, the process that cannot be adopted is
    stopped after the grace."""
    config = f"[limits.user.{system_users.name('bob')}]\nmax_gpus = 0\n"
    daemon, clock = start(
        paths, node, config, unleased_use="adopt", unleased_over_limit="terminate"
    )
    pid = node.start("bob")
    node.put(UUID3, pid)
    wait_for(lambda: actions(daemon, pid) == ["reported"], timeout=30, what="the report")
    assert alive(pid)
    clock.advance(61)
    wait_for(lambda: not alive(pid), timeout=30, what="the process to stop")
    assert actions(daemon, pid) == ["reported", "terminated"]


def test_adopt_takes_a_mig_instance(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """bob's process in MIG instance gi 2 of GPU 7 becomes his lease of that instance."""
    daemon, _ = start(paths, node, unleased_use="adopt")
    pid = node.start("bob")
    node.put(UUID7, pid, gpu_instance_id=2, compute_instance_id=0)
    with daemon.client() as client:
        wait_for(lambda: len(client.leases()) == 1, timeout=30, what="the adoption")
        (lease,) = client.leases()
    assert lease.uuids == (MIG_GI2,) and lease.raw["gpus"][0]["kind"] == "mig"
