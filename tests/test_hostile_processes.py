"""Case 6: the lease follows the work, not the wrapper; revoke acts; GPUs drain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpulease import Client, GpuBusy, Lease

from gpuallocd.cli import cli
from gpuallocd.cli.errors import EXIT_REVOKED
from gpuallocd.testing import FakeNvml, nvml_inventory
from tests.harness import ThreadDaemon, ctl_argv, wait_for
from tests.local_users import LocalUser, run_as

FORKING_HOLDER = """
import os, sys, time
import gpulease
with gpulease.gpu_lease(1) as lease:
    worker = os.fork()
    if worker == 0:
        quiet = os.open(os.devnull, os.O_RDWR)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        time.sleep(600)
        os._exit(0)
    with gpulease.Client() as client:
        client.renew(lease.id)  # the daemon looks for new processes of the lease at once
    print(lease.id, worker, flush=True)
    os._exit(0)  # the holder is gone without freeing; its worker still runs
"""

SLEEPER = "import time; print('ready', flush=True); time.sleep(600)"
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(600)"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):  # gone, or reaped between the two
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def _run(daemon: ThreadDaemon, *command: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ctl_argv(daemon.paths.socket, "run", "-n", "1", "--", sys.executable, "-c", *command),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _processes(client: Client, lease_id: str) -> list[int]:
    pids: list[int] = client.lease(lease_id).raw["processes"]
    return pids


def _started(
    daemon: ThreadDaemon, client: Client, script: str
) -> tuple[subprocess.Popen[str], Lease, int]:
    """`run` of `script`, once the script said `ready` and its lease covers run and the
    script: run's process, the lease and the script's pid."""
    wrapper = _run(daemon, script)
    assert wrapper.stdout is not None and wrapper.stdout.readline().strip() == "ready"
    (lease,) = client.leases()
    wait_for(lambda: len(_processes(client, lease.id)) == 2, timeout=20)
    command = next(p for p in _processes(client, lease.id) if p != wrapper.pid)
    return wrapper, lease, command


@pytest.fixture
def reap() -> Iterator[list[int]]:
    """Pids a test leaves running (orphans handed to init); killed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_worker_forked_by_a_gpu_lease_holder_keeps_the_lease(
    daemon: ThreadDaemon, reap: list[int]
) -> None:
    """The holder forks a worker and exits: the lease stays while the worker runs and ends
    when it exits."""
    env = {**os.environ, "GPUALLOCD_SOCKET": str(daemon.paths.socket)}
    holder = subprocess.run(
        [sys.executable, "-c", FORKING_HOLDER], capture_output=True, text=True, env=env, timeout=60
    )
    lease_id, worker_text = holder.stdout.split()
    worker = int(worker_text)
    reap.append(worker)
    with daemon.client() as client:
        wait_for(lambda: _processes(client, lease_id) == [worker], timeout=20)
        assert client.lease(lease_id).state == "active"
        os.kill(worker, signal.SIGKILL)
        wait_for(lambda: client.lease(lease_id).state == "freed", timeout=20)


def test_kill_9_of_run_leaves_the_command_its_lease(daemon: ThreadDaemon, reap: list[int]) -> None:
    """`kill -9` of gpuallocctl run: the command keeps the lease until it exits."""
    with daemon.client() as client:
        wrapper, lease, command = _started(daemon, client, SLEEPER)
        reap.append(command)
        wrapper.kill()
        wrapper.wait(20)
        for pipe in (wrapper.stdout, wrapper.stderr):
            pipe.close()  # the command still holds their other ends
        wait_for(lambda: _processes(client, lease.id) == [command], timeout=20)
        assert client.lease(lease.id).state == "active"
        os.kill(command, signal.SIGKILL)
        wait_for(lambda: client.lease(lease.id).state == "freed", timeout=20)


def test_revoking_a_run_lease_stops_the_command_and_says_why(daemon: ThreadDaemon) -> None:
    """Revoke: the command gets SIGTERM; run prints the warning of the kill to come (the
    revoke's `ending` event), then one line with the reason, and exits 7."""
    with daemon.client() as client:
        wrapper, lease, _ = _started(daemon, client, SLEEPER)
        client.revoke(lease.id, reason="maintenance at noon")
    _, err = wrapper.communicate(timeout=30)
    assert wrapper.returncode == EXIT_REVOKED
    lines = err.strip().splitlines()
    assert len(lines) == 3 and "Warning" not in err, err
    said = (
        f"gpuallocctl: lease {lease.id} was revoked (maintenance at noon); the command was stopped"
    )
    (warned,) = [line for line in lines[1:] if line != said]  # from the watch's own thread
    assert warned.startswith(f"gpuallocctl: lease {lease.id}: ending: lease {lease.id} ")
    assert "was revoked: its processes are stopped in 30s" in warned


def test_a_command_that_ignores_sigterm_is_killed_after_the_grace(
    start_daemon: Callable[..., ThreadDaemon], reap: list[int]
) -> None:
    """After revoke_grace_seconds, SIGKILL: nothing of a revoked run lease keeps running."""
    daemon = start_daemon(default_policy="simple", revoke_grace_seconds=0.2)
    with daemon.client() as client:
        wrapper, lease, command = _started(daemon, client, STUBBORN)
        reap.append(command)
        client.revoke(lease.id)
    wait_for(lambda: not _alive(command), timeout=30)
    wrapper.communicate(timeout=30)
    assert wrapper.returncode != 0


@pytest.fixture
def dgx(start_daemon: Callable[..., ThreadDaemon]) -> Iterator[tuple[ThreadDaemon, FakeNvml]]:
    """A daemon over the recorded DGX A100, sampling often, with the fake to drive it."""
    inventory, fake = nvml_inventory("dgx-a100-mig", xid_wait_ms=20)
    daemon = start_daemon(
        inventory="nvml-recording:dgx-a100-mig",
        inventory_opener=lambda spec: inventory,
        sample_interval_seconds=0.05,
    )
    yield daemon, fake
    inventory.close()


HOLD_AND_WORK = """
import gpulease, time
with gpulease.Client() as client:
    lease = client.allocate(1)
print(lease.id, lease.gpus[0].uuid, flush=True)
time.sleep(600)
"""


def test_a_gpu_drains_while_its_former_holder_still_runs_on_it(
    users: tuple[LocalUser, LocalUser],
    dgx: tuple[ThreadDaemon, FakeNvml],
    user_processes: list[subprocess.Popen[str]],
) -> None:
    """After a revoke, the GPU is `draining` while the user's process is on it, and is not
    granted; `gpuallocctl release GPU` (root) gives it back."""
    ana, _ = users
    daemon, fake = dgx
    os.chmod(daemon.paths.root, 0o755)
    worker = run_as(ana, HOLD_AND_WORK, daemon.paths.socket)
    user_processes.append(worker)
    assert worker.stdout is not None
    lease_id, uuid = worker.stdout.readline().split()
    fake.set_processes(uuid, [(worker.pid, 2**30)])
    with daemon.client() as client:
        wait_for(lambda: _state(client, uuid) == "leased", timeout=10)
        client.revoke(lease_id, reason="drain test")
        wait_for(lambda: _state(client, uuid) == "draining", timeout=10)
        with pytest.raises(GpuBusy):
            client.allocate(gpus=[uuid])
    result = CliRunner().invoke(cli, ["--socket", str(daemon.paths.socket), "release", uuid])
    assert result.exit_code == 0, result.output
    assert "free now" in result.output
    with daemon.client() as client:
        assert client.allocate(gpus=[uuid]).uuids == (uuid,)


def _state(client: Client, uuid: str) -> str:
    return next(g.state for g in client.status() if g.uuid == uuid)
