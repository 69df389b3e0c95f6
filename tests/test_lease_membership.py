"""Case 8: what a lease covers survives a restart and costs only its own family.

A revoke of a `gpuallocctl run` lease stops its command because the ledger says the lease
asked for it (`on_revoke`), not because the command's environment says so: after a restart
and the death of `run` itself, a command that dropped `GPUALLOCD_ON_REVOKE` from its
environment is stopped all the same. A detached lease never looks at its caller's
processes, and a bound one walks only its holder's own family (issue 38, finding 3). The
scope mode, what the shipped unit picks under systemd, is tried in tests/system/.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpulease import Client

from gpuallocd.host.proc import descendants
from gpuallocd.processes import lease_processes
from tests.harness import DaemonPaths, ProcessDaemon, ThreadDaemon, wait_for
from tests.system_users import SystemUsers, open_to_everyone
from tests.test_hostile_enforcement import lose_events_while
from tests.test_unit_capabilities import SLEEPER, alive


@pytest.fixture
def commands() -> Iterator[list[int]]:
    """Pids a test leaves running; killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def start_run(
    users: SystemUsers, daemon: ProcessDaemon, command: list[str]
) -> tuple[subprocess.Popen[str], str, int]:
    """alice's `gpuallocctl run -n 1 -- COMMAND`, once its lease covers the command: run's
    process, the lease id and the command's pid."""
    log = daemon.paths.root / "run.log"
    argv = ["-m", "gpuallocd.cli", "--socket", str(daemon.paths.socket), "run", "-n", "1"]
    wrapper = users.start("alice", [*argv, "--", *command], log)
    with Client(daemon.paths.socket) as client:
        wait_for(lambda: len(client.leases()) == 1, timeout=30, what="alice's lease")
        (lease,) = client.leases()
        wait_for(
            lambda: len(client.lease(lease.id).raw["processes"]) == 2,
            timeout=30,
            what="the lease to cover run and its command",
        )
        pids = client.lease(lease.id).raw["processes"]
    return wrapper, lease.id, next(pid for pid in pids if pid != wrapper.pid)


def test_after_a_restart_a_revoke_stops_a_dead_runs_command_whatever_its_environment(
    paths: DaemonPaths,
    unit_daemon: Callable[..., ProcessDaemon],
    system_users: SystemUsers,
    commands: list[int],
) -> None:
    """alice's `run` starts a command that drops GPUALLOCD_ON_REVOKE from its environment;
    the daemon is killed, then `run` (kill -9), and the daemon starts again: root's revoke
    stops the command, as the ledger's `on_revoke` says (before: only the environment said
    it, and the command ran on)."""
    open_to_everyone(paths.root)
    daemon = unit_daemon(revoke_grace_seconds=2.0)
    python = system_users.python
    command = ["/usr/bin/env", "-u", "GPUALLOCD_ON_REVOKE", python, "-c", SLEEPER]
    wrapper, lease_id, pid = start_run(system_users, daemon, command)
    commands.append(pid)
    assert b"GPUALLOCD_ON_REVOKE" not in Path(f"/proc/{pid}/environ").read_bytes()
    daemon.kill()
    wrapper.kill()
    wrapper.wait(10)
    restarted = unit_daemon(revoke_grace_seconds=2.0)
    with restarted.client() as client:
        lease = client.lease(lease_id)
        assert lease.state == "active" and pid in lease.raw["processes"]
        client.revoke(lease_id, reason="maintenance")
        wait_for(lambda: not alive(pid), timeout=30, what="the daemon to stop the command")
        assert client.lease(lease_id).raw["on_revoke"] == "terminate"


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The processes whose descendants the lease tracking reads from /proc, in order (the
    real walk, recorded)."""
    seen: list[int] = []

    def recorded(pid: int) -> list[tuple[int, int]]:
        seen.append(pid)
        return descendants(pid)

    monkeypatch.setattr(lease_processes, "descendants", recorded)
    return seen


@pytest.fixture
def children() -> Iterator[list[int]]:
    """This process's own children, twenty idle ones: the caller has a family to walk."""
    started = [subprocess.Popen(["sleep", "600"]) for _ in range(20)]
    yield [child.pid for child in started]
    for child in started:
        child.kill()
        child.wait()


@pytest.mark.parametrize("tracking", ["connector", "proc-scan"])
def test_a_detached_lease_walks_no_process_and_a_bound_one_only_its_holders_family(
    tracking: str,
    start_daemon: Callable[..., ThreadDaemon],
    walks: list[int],
    children: list[int],
) -> None:
    """A caller with children takes detached leases: its processes are never walked (before:
    every grant walked all of them in connector mode). Its bound lease walks its own
    family once, rooted at itself, and covers its children."""
    if tracking == "connector" and os.geteuid() != 0:
        pytest.skip("the kernel's process events need root")
    daemon = start_daemon(default_policy="simple", process_tracking=tracking)
    with daemon.client() as client:
        assert client.health()["process_tracking"] == tracking
        for _ in range(3):
            client.free(client.allocate(1).id)
        assert walks == []
        bound = client.allocate(1, bind_to_process=True)
        assert set(walks) <= {os.getpid()} and len(walks) <= 1
        if tracking == "connector":
            assert walks == [os.getpid()]
            assert set(children) <= set(client.lease(bound.id).raw["processes"])
        client.free(bound.id)


def uids(pid: int) -> list[int]:
    """The real, effective, saved and file system uids of a process, as the kernel says."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return [int(uid) for uid in line.split()[1:]]
    return []


ROOTS_HOLDER = """
import sys, time
from gpulease import gpu_lease
with gpu_lease(1, socket=sys.argv[1]) as lease:
    print(lease.id, flush=True)
    time.sleep(600)
"""


def test_a_set_user_id_process_naming_a_lease_is_not_taken_into_it_after_lost_events(
    paths: DaemonPaths,
    start_daemon: Callable[..., ThreadDaemon],
    system_users: SystemUsers,
) -> None:
    """Root holds a bound lease; bob runs a set-user-ID-root program with root's lease id in
    its environment (its effective uid is root's, its real uid bob's); process events are
    lost, and the rescan reads environments: bob's process is not taken into root's lease
    (before: it was, and kept root's lease alive while it ran)."""
    if os.geteuid() != 0:
        pytest.skip("a set-user-ID-root program needs root to make")
    open_to_everyone(paths.root)
    program = paths.root / "setuid-sleep"
    program.write_bytes(Path("/bin/sleep").read_bytes())
    program.chmod(0o4755)
    daemon = start_daemon(default_policy="simple", process_tracking="connector")
    bob = system_users.uid("bob")
    log = paths.root / "holder.log"
    with open(log, "w") as out:
        holder = subprocess.Popen(
            [sys.executable, "-c", ROOTS_HOLDER, str(paths.socket)], stdout=out
        )
    started = [holder]
    try:
        wait_for(lambda: log.read_text().strip() != "", timeout=30, what="root's lease")
        lease_id = log.read_text().strip()
        bobs = system_users.start(
            "bob",
            [
                "-c",
                "import os, sys; os.execve(sys.argv[1], ['sleep', '600'], "
                f"{{**os.environ, 'GPUALLOCD_LEASE_ID': {lease_id!r}}})",
                str(program),
            ],
            paths.root / "bob.log",
        )
        started.append(bobs)
        wait_for(lambda: uids(bobs.pid)[:2] == [bob, 0], timeout=10, what="the set-user-ID exec")
        lose_events_while(daemon, lambda: None)
        with daemon.client() as client:
            assert client.lease(lease_id).raw["processes"] == [holder.pid]
    finally:
        for process in started:
            process.kill()
            process.wait(10)
