"""`unleased_use = "report"` (the default): a process on a GPU its user holds no lease on is
named once, to everyone concerned, and left running. Real users, real processes, a real
daemon; the recorded NVML machine is told through its live file which pids run where."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from gpuallocd.cli.leasing.revoke_watch import descendants
from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.rules_harness import daemon_with_config
from tests.system_users import SystemUsers
from tests.unleased_helpers import Node, alive, exec_code, node, ran, root_xorg

__all__ = ["node", "root_xorg"]

UUID3 = "GPU-f06d330d-af21-5a36-84a7-d3d20d41fb7f"
UUID7 = "GPU-495f5088-1f28-519e-b665-7c23402fd3b3"
MIG_GI2 = "MIG-9aaf1f46-ef8b-5527-b7bb-e6ccd72621c1"
MIG_GI3 = "MIG-f1cbebff-8b68-589a-a9ed-a18a7113e4ae"


def start(paths: DaemonPaths, node: Node, config: str = "", **settings: Any) -> ThreadDaemon:
    settings.setdefault("sample_interval_seconds", 0.1)
    return daemon_with_config(paths, config, inventory=node.inventory, **settings).start()


def actions(daemon: ThreadDaemon, pid: int) -> list[str]:
    with daemon.client() as client:
        return [e["action"] for e in client.unleased()["events"] if e["pid"] == pid]


def test_a_process_on_someone_elses_gpu_is_reported_once_to_all(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """bob's process on alice's GPU 3: one `reported` record, one `unleased-use` event in
    alice's lease naming it, shown in `status`, `leases`, `unleased` and the metrics; it keeps
    running."""
    metrics = paths.root / "gpuallocd.prom"
    daemon = start(paths, node, metrics_textfile=str(metrics))
    alice = system_users.ctl("alice", paths.socket, "--json", "allocate", "--gpu", "3")
    assert alice.returncode == 0, alice.stderr
    with daemon.client() as client:
        (lease,) = client.leases()
    pid = node.start("bob")
    node.put(UUID3, pid)
    wait_for(lambda: actions(daemon, pid) == ["reported"], timeout=30, what="the report")
    with daemon.client() as client:
        node.sampled(client)
    assert actions(daemon, pid) == ["reported"]  # once, not at every sample
    bob = system_users.name("bob")
    program = Path(system_users.python).name[:15]  # its comm: the name it was run by
    message = f"pid {pid} of {bob} uses GPU 3 without a lease ({program}"
    with daemon.client() as client:
        told = [e for e in client.history(lease.id) if e["event"] == "unleased-use"]
    assert len(told) == 1 and told[0]["detail"].startswith(message)
    status = system_users.ctl("carol", paths.socket, "status", "-v").stdout
    assert f"{bob}({pid} python" in status and message in status
    leases = system_users.ctl("alice", paths.socket, "leases").stdout
    assert f"lease {lease.id}: {message}" in leases
    assert alive(pid)
    counted = 'gpuallocd_unleased_actions_total{action="reported"} 1.0'

    def exported() -> bool:
        return metrics.exists() and counted in metrics.read_text()

    wait_for(exported, timeout=30, what="the metric")


def test_a_process_on_a_free_gpu_is_reported_and_shows_in_the_queue(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """bob's process on free GPU 3 is reported; a request for GPU 3 hears who uses it."""
    daemon = start(paths, node)
    pid = node.start("bob")
    node.put(UUID3, pid)
    wait_for(lambda: actions(daemon, pid) == ["reported"], timeout=30, what="the report")
    with daemon.client() as client:
        (gpu,) = [g for g in client.status() if g.raw["uuid"] == UUID3]
        assert [u["pid"] for u in gpu.raw["unleased"]] == [pid]
        assert client.unleased()["processes"][0]["message"].startswith(f"pid {pid} of ")


def test_exempt_commands_users_and_owners_are_left_alone(
    paths: DaemonPaths, node: Node, system_users: SystemUsers, root_xorg: str
) -> None:
    """A display server (a program of root's named Xorg), an exempt user's job, and alice's
    job on her own GPU are not reported; bob's job beside them is."""
    daemon = start(paths, node, unleased_exempt_users=[system_users.name("carol")])
    alice = system_users.ctl("alice", paths.socket, "allocate", "--gpu", "3")
    assert alice.returncode == 0, alice.stderr
    xorg, carols, alices, bobs = (
        node.start("dave", exec_code(root_xorg, "600")),
        node.start("carol"),
        node.start("alice"),
        node.start("bob"),
    )
    ran(xorg)
    for pid in (xorg, carols, alices, bobs):
        node.put(UUID3, pid)
    wait_for(lambda: actions(daemon, bobs) == ["reported"], timeout=30, what="bob's report")
    with daemon.client() as client:
        node.sampled(client)
    assert [actions(daemon, pid) for pid in (xorg, carols, alices)] == [[], [], []]


def test_a_group_may_be_left_out_by_the_limits_table(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """`[limits.group.students] unleased_use = "off"`: alice (a student) is not reported;
    carol (no group) is."""
    students = system_users.name("students")
    config = f'[limits.group.{students}]\nunleased_use = "off"\n'
    daemon = start(paths, node, config)
    alices, carols = node.start("alice"), node.start("carol")
    node.put(UUID3, alices)
    node.put(UUID3, carols)
    wait_for(lambda: actions(daemon, carols) == ["reported"], timeout=30, what="carol's report")
    with daemon.client() as client:
        node.sampled(client)
    assert actions(daemon, alices) == []


def test_mig_instances_are_told_apart(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """On GPU 7 (MIG), alice holds instance gi 3: bob's process in gi 2 is reported as use of
    that instance, alice is not told (not hers), and alice's own process in gi 3 is fine."""
    daemon = start(paths, node)
    held = system_users.ctl("alice", paths.socket, "--json", "allocate", "--gpu", MIG_GI3)
    assert held.returncode == 0, held.stderr
    bobs, alices = node.start("bob"), node.start("alice")
    node.put(UUID7, bobs, gpu_instance_id=2, compute_instance_id=0)
    node.put(UUID7, alices, gpu_instance_id=3, compute_instance_id=0)
    wait_for(lambda: actions(daemon, bobs) == ["reported"], timeout=30, what="bob's report")
    with daemon.client() as client:
        node.sampled(client)
    assert actions(daemon, alices) == []
    with daemon.client() as client:
        (record,) = [e for e in client.unleased()["events"] if e["pid"] == bobs]
        (lease,) = client.leases()
        assert record["unit_uuid"] == MIG_GI2 and record["lease_id"] is None
        assert [e["event"] for e in client.history(lease.id)] == ["granted"]


def test_a_waiter_hears_who_uses_its_gpu_without_a_lease(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """alice waits for GPU 3, which bob's process uses without a lease: `queue` says so."""
    daemon = start(paths, node)
    pid = node.start("bob")
    node.put(UUID3, pid)
    wait_for(lambda: actions(daemon, pid) == ["reported"], timeout=30, what="the report")
    log = paths.root / "alice-wait.log"
    argv = ["-m", "gpuallocd.cli", "--socket", str(paths.socket), "allocate", "--gpu", "3"]
    waiting = system_users.start("alice", [*argv, "--wait"], log)
    try:
        with daemon.client() as client:
            wait_for(lambda: len(client.queue()) == 1, timeout=30, what="alice in the queue")
            (waiter,) = client.queue()
        assert f"GPU 3 in-use (pid {pid} uses it without a lease)" in waiter["reason_detail"]
        queue = system_users.ctl("carol", paths.socket, "queue", "-v").stdout
        assert f"pid {pid} uses it without a lease" in queue
    finally:
        waiting.kill()
        waiting.wait(10)


def test_run_tells_its_user_who_uses_the_gpu(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """alice's `gpuallocctl run` prints "pid N of bob uses GPU K without a lease" on stderr
    when bob's process turns up on her GPU."""
    daemon = start(paths, node)
    log = paths.root / "run.log"
    argv = ["-m", "gpuallocd.cli", "--socket", str(paths.socket), "run", "-n", "1", "--"]
    wrapper = system_users.start(
        "alice", [*argv, system_users.python, "-c", "import time; time.sleep(600)"], log
    )
    try:
        with daemon.client() as client:
            wait_for(lambda: len(client.leases()) == 1, timeout=30, what="alice's lease")
            (lease,) = client.leases()
        pid = node.start("bob")
        node.put(lease.uuids[0], pid)
        index = lease.raw["gpus"][0]["index"]
        line = f"pid {pid} of {system_users.name('bob')} uses GPU {index} without a lease"
        wait_for(lambda: line in log.read_text(), timeout=30, what="run's line")
        assert f"lease {lease.id}: unleased-use: {line}" in log.read_text()
    finally:
        for child in descendants(wrapper.pid):
            os.kill(child, signal.SIGKILL)
        wrapper.kill()
        wrapper.wait(10)


UUID1 = "GPU-bf340323-c32c-5418-b181-82a3e285b2fe"


def test_a_process_seen_on_one_gpu_is_reported_on_anothers_leased_gpu_too(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """bob's process, reported on free GPU 3, then also runs on alice's GPU 1: it is reported
    there too (tracking is by process and unit), in `unleased` and in her lease's history."""
    daemon = start(paths, node)
    pid = node.start("bob")
    node.put(UUID3, pid)
    wait_for(lambda: actions(daemon, pid) == ["reported"], timeout=30, what="the first report")
    alice = system_users.ctl("alice", paths.socket, "--json", "allocate", "--gpu", "1")
    assert alice.returncode == 0, alice.stderr
    with daemon.client() as client:
        (lease,) = client.leases()
    node.put(UUID1, pid)
    wait_for(lambda: actions(daemon, pid) == ["reported"] * 2, timeout=30, what="the second")
    with daemon.client() as client:
        told = [e for e in client.history(lease.id) if e["event"] == "unleased-use"]
        offenders = {(p["pid"], p["gpu_index"]) for p in client.unleased()["processes"]}
    assert (
        len(told) == 1
        and f"pid {pid} of {system_users.name('bob')} uses GPU 1" in told[0]["detail"]
    )
    assert {(pid, 1), (pid, 3)} <= offenders
