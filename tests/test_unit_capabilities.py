"""What acts on other users' processes works with only the capabilities the unit grants.

Each daemon here runs as root under `setpriv --bounding-set` with exactly the
CapabilityBoundingSet= of `systemd/gpuallocd.service`, read from the file (tests/service_unit.py),
and the processes it acts on belong to a real other user.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpulease import Client

from gpuallocd.cli.errors import EXIT_REVOKED
from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.lease_work import (
    covered,
    kill_and_time_the_end,
    kill_marked,
    marked,
    prepare_work_dir,
    start_and_leave,
)
from tests.service_unit import shipped_unit
from tests.system_users import SystemUsers, open_to_everyone

GIB = 2**30
SLEEPER = "import time; print('ready', flush=True); time.sleep(600)"


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


@pytest.fixture
def node(
    system_users: SystemUsers,
    paths: DaemonPaths,
    unit_daemon: Callable[..., ProcessDaemon],
) -> Callable[..., ProcessDaemon]:
    """A daemon with the unit's capabilities, its socket open to the test users."""
    open_to_everyone(paths.root)

    def start(**settings: object) -> ProcessDaemon:
        return unit_daemon(revoke_grace_seconds=2.0, **settings)

    return start


@pytest.fixture
def commands(system_users: SystemUsers, paths: DaemonPaths) -> Iterator[list[int]]:
    """Pids of user commands a test may leave behind; killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def start_run(
    users: SystemUsers, daemon: ProcessDaemon, *options: str
) -> tuple[subprocess.Popen[str], str, int]:
    """alice's `gpuallocctl run OPTIONS -- python -c SLEEPER`, once its lease covers the
    sleeper: run's process, the lease id and the sleeper's pid."""
    log = daemon.paths.root / f"run-{len(list(daemon.paths.root.glob('run-*')))}.log"
    argv = ["-m", "gpuallocd.cli", "--socket", str(daemon.paths.socket), "--json", "run"]
    wrapper = users.start("alice", [*argv, *options, "--", users.python, "-c", SLEEPER], log)
    with Client(daemon.paths.socket) as client:
        wait_for(lambda: len(client.leases()) == 1, timeout=30, what="alice's lease")
        (lease,) = client.leases()

        def covered() -> bool:
            return len(client.lease(lease.id).raw["processes"]) == 2

        wait_for(covered, timeout=30, what="the lease to cover run and its command")
        pids = client.lease(lease.id).raw["processes"]
    command = next(pid for pid in pids if pid != wrapper.pid)
    return wrapper, lease.id, command


def test_the_unit_grants_what_acting_on_other_users_processes_needs() -> None:
    """The bounding set holds CAP_KILL (revoke and enforcement signal other users'
    processes) and CAP_DAC_READ_SEARCH with CAP_SYS_PTRACE (reading their environment)."""
    granted = set(shipped_unit().capabilities)
    assert {"CAP_KILL", "CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"} <= granted


def test_the_unit_grants_what_the_process_events_need() -> None:
    """AF_NETLINK (the process connector's socket family) and CAP_NET_ADMIN (the listener
    on kernels before 6.6, and its receive buffer)."""
    unit = shipped_unit()
    assert "AF_NETLINK" in unit.address_families
    assert "CAP_NET_ADMIN" in unit.capabilities


def test_under_the_units_capabilities_a_fork_and_exit_stays_under_the_lease(
    node: Callable[..., ProcessDaemon], system_users: SystemUsers, paths: DaemonPaths
) -> None:
    """The daemon with only the unit's capabilities follows forks by the kernel's events: a
    worker forked by alice's holder, which exits at once, keeps the lease until killed."""
    daemon = node()
    work_dir = prepare_work_dir(paths.root)
    try:
        lease_id = start_and_leave(system_users, daemon, work_dir, "if os.fork() == 0: work()\n")
        with Client(daemon.paths.socket) as client:
            assert client.health()["process_tracking"] == "connector"
            wait_for(lambda: len(marked(work_dir)) == 1, timeout=30, what="the worker")
            wait_for(lambda: covered(client, lease_id) == marked(work_dir), timeout=20)
            assert client.lease(lease_id).state == "active"
            assert kill_and_time_the_end(client, lease_id, marked(work_dir)) < 2.0
    finally:
        kill_marked(work_dir)
    assert "process tracking: connector" in daemon.stderr()


def test_the_daemon_runs_with_exactly_the_units_capabilities(
    node: Callable[..., ProcessDaemon],
) -> None:
    """The harness really drops the rest: the daemon's effective set is the unit's."""
    daemon = node()
    assert daemon.process is not None
    status = Path(f"/proc/{daemon.process.pid}/status").read_text()
    effective = int(next(x for x in status.splitlines() if x.startswith("CapEff:")).split()[1], 16)
    assert effective.bit_count() == len(shipped_unit().capabilities)


def test_revoke_stops_a_users_run_command(
    node: Callable[..., ProcessDaemon], system_users: SystemUsers, commands: list[int]
) -> None:
    """Root revokes alice's `gpuallocctl run`: the command stops and run exits 7."""
    daemon = node()
    wrapper, lease_id, command = start_run(system_users, daemon, "-n", "1")
    commands.append(command)
    with Client(daemon.paths.socket) as client:
        client.revoke(lease_id, reason="maintenance")
    assert wrapper.wait(timeout=60) == EXIT_REVOKED
    wait_for(lambda: not alive(command), timeout=30, what="the command to stop")
    assert "not allowed" not in daemon.stderr()


def test_revoke_stops_the_command_of_a_run_killed_with_sigkill(
    node: Callable[..., ProcessDaemon], system_users: SystemUsers, commands: list[int]
) -> None:
    """With `run` gone (kill -9), the command keeps its lease; a revoke still stops it: the
    daemon signals alice's process itself."""
    daemon = node()
    wrapper, lease_id, command = start_run(system_users, daemon, "-n", "1")
    commands.append(command)
    wrapper.kill()
    wrapper.wait(10)
    assert alive(command)
    with Client(daemon.paths.socket) as client:
        assert client.lease(lease_id).state == "active"
        client.revoke(lease_id, reason="maintenance")
    wait_for(lambda: not alive(command), timeout=30, what="the daemon to stop the command")
    assert "not allowed" not in daemon.stderr()


def test_share_enforcement_warns_then_kills_another_users_job(
    node: Callable[..., ProcessDaemon],
    system_users: SystemUsers,
    paths: DaemonPaths,
    commands: list[int],
) -> None:
    """`share_enforcement = "kill"`: alice's job over its 10 GiB share (the recorded NVML
    machine reports 12 GiB for its pid) is warned, then killed."""
    live = paths.root / "live.json"
    live.write_text("{}")
    daemon = node(
        inventory=f"nvml-recording:dgx-a100-mig?live={live}",
        shared_gpus=["all"],
        share_enforcement="kill",
        sample_interval_seconds=0.2,
    )
    wrapper, lease_id, command = start_run(system_users, daemon, "--memory", "10G")
    commands.append(command)
    with Client(daemon.paths.socket) as client:
        uuid = client.lease(lease_id).uuids[0]
    report = {uuid: {"processes": [{"pid": command, "used_memory_bytes": 12 * GIB}]}}
    live.write_text(json.dumps(report))
    wait_for(lambda: not alive(command), timeout=30, what="the job to be killed")
    wrapper.wait(timeout=30)
    with Client(daemon.paths.socket) as client:
        events = [e["event"] for e in client.history(lease_id) if e["event"] != "renewed"]
    assert events[:3] == ["granted", "warned", "enforced"]
