"""Idle reclaim over the fake NVML: idle leases are reported, and revoked only for a waiter."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.testing import FakeNvml, nvml_inventory
from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.rules_harness import SteppedClock, daemon_with_config
from tests.system_users import SystemUsers, open_to_everyone

RECORDING = "pcie-dual-socket"  # 4 GPUs, 0% utilisation, no process
SAMPLE_SECONDS = 0.05
MINUTE = 60.0


@dataclass
class IdleNode:
    daemon: ThreadDaemon
    fake: FakeNvml
    clock: SteppedClock
    _marks: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def sampled(self) -> None:
        """Return once the daemon has adopted two samples taken after this call, so the idle
        check that follows the first of them has run."""
        with self.daemon.client() as client:
            for _ in range(2):
                mark = next(self._marks) * 2**20
                self.fake.set_memory_used(self.fake.uuids()[0], mark)
                wait_for(lambda: client.status()[0].raw["memory_used_bytes"] == mark, 30)  # noqa: B023


def start_idle_node(
    paths: DaemonPaths, clock: SteppedClock | None = None, **settings: Any
) -> tuple[IdleNode, NvmlInventory]:
    """A daemon over a fresh fake NVML; `clock`: go on with a stopped one's clock."""
    inventory, fake = nvml_inventory(RECORDING, xid_wait_ms=20)
    clock = clock or SteppedClock()
    daemon = daemon_with_config(
        paths,
        'default_policy = "simple"\n',
        clock=clock,
        inventory_opener=lambda _spec: inventory,
        inventory=f"nvml-recording:{RECORDING}",
        sample_interval_seconds=SAMPLE_SECONDS,
        **settings,
    ).start()
    return IdleNode(daemon, fake, clock), inventory


@pytest.fixture
def idle_node(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> Iterator[tuple[IdleNode, SystemUsers]]:
    """Reclaim after 30 idle minutes plus 10 of grace, on an injected clock."""
    open_to_everyone(short_dir)
    node, inventory = start_idle_node(paths, idle_reclaim_minutes=30.0, idle_grace_minutes=10.0)
    yield node, system_users
    node.daemon.stop()
    inventory.close()


def as_user(users: SystemUsers, who: str, socket: Path, *args: str) -> dict[str, Any]:
    done = users.ctl(who, socket, "--json", *args)
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_an_idle_lease_is_reported_and_revoked_only_once_someone_waits(
    idle_node: tuple[IdleNode, SystemUsers], short_dir: Path
) -> None:
    """bob's lease of every GPU idles: after 30 minutes his renew says so; 46 minutes in,
    with nobody waiting, it still stands; when alice waits it is revoked, with the reason in
    the history, and alice is served."""
    node, users = idle_node
    socket = node.daemon.paths.socket
    lease = as_user(users, "bob", socket, "allocate", "-n", "4")
    node.sampled()
    assert "idle" not in as_user(users, "bob", socket, "renew", lease["id"])
    node.clock.advance(31 * MINUTE)
    node.sampled()
    idle = as_user(users, "bob", socket, "renew", lease["id"])["idle"]
    assert idle["revocable_at"] - idle["idle_since"] == pytest.approx(40 * MINUTE)
    node.clock.advance(15 * MINUTE)
    node.sampled()
    with node.daemon.client() as root:
        assert root.lease(lease["id"]).state == "active"
        waiter = users.start(
            "alice",
            ["-m", "gpuallocd.cli", "--socket", str(socket), "allocate", "-n", "1", "--wait"],
            short_dir / "alice.log",
        )
        assert waiter.wait(60) == 0, (short_dir / "alice.log").read_text()
        assert root.lease(lease["id"]).state == "revoked"
        detail = root.history(lease["id"])[-1]["detail"]
        assert detail.startswith("idle reclaim: no process and 0% utilisation")
        assert [held.user for held in root.leases()] == [users.name("alice")]


def test_a_lease_whose_gpu_runs_a_process_is_never_reclaimed(
    idle_node: tuple[IdleNode, SystemUsers], short_dir: Path
) -> None:
    """A process on one of bob's GPUs keeps his lease busy: 50 minutes later, with alice
    waiting, it stands and alice keeps waiting."""
    node, users = idle_node
    socket = node.daemon.paths.socket
    lease = as_user(users, "bob", socket, "allocate", "-n", "4", "--ttl", "7200")
    node.fake.set_processes(lease["gpus"][3]["uuid"], [(4242, 2**30)])
    node.fake.set_utilization(lease["gpus"][3]["uuid"], 0)
    node.sampled()
    node.clock.advance(50 * MINUTE)
    waiter = users.start(
        "alice",
        ["-m", "gpuallocd.cli", "--socket", str(socket), "allocate", "-n", "1", "--wait"],
        short_dir / "alice.log",
    )
    try:
        with node.daemon.client() as root:
            wait_for(lambda: len(root.queue()) == 1, 30)
            node.sampled()
            assert root.lease(lease["id"]).state == "active"
            assert len(root.queue()) == 1
    finally:
        waiter.kill()
        waiter.wait(10)


WAIT_FOR_FLAG = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"


@pytest.fixture
def fast_idle_node(paths: DaemonPaths) -> Iterator[IdleNode]:
    """Reclaim after 0.3 s of idleness (real time): for what the holder is told."""
    node, inventory = start_idle_node(paths, idle_reclaim_minutes=0.005, idle_grace_minutes=10.0)
    yield node
    node.daemon.stop()
    inventory.close()


def run_until_told(node: IdleNode, argv: list[str], short_dir: Path) -> str:
    """Run argv (which waits for a flag file) until its stderr mentions the idle notice."""
    flag, log = short_dir / "flag", short_dir / "stderr.log"
    env = {"GPUALLOCD_SOCKET": str(node.daemon.paths.socket), "PATH": "/usr/bin:/bin"}
    with open(log, "w") as err:
        process = subprocess.Popen([*argv, str(flag)], stderr=err, env=env)
    try:
        wait_for(lambda: "may be revoked" in log.read_text(), 30)
        flag.touch()
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    return log.read_text()


def test_run_prints_one_line_when_its_lease_is_idle(
    fast_idle_node: IdleNode, short_dir: Path
) -> None:
    """`gpuallocctl run` prints the idle notice once, however often it renews after."""
    command = [sys.executable, "-m", "gpuallocd.cli", "run", "--ttl", "10s", "--"]
    output = run_until_told(
        fast_idle_node, [*command, sys.executable, "-c", WAIT_FOR_FLAG], short_dir
    )
    told = [line for line in output.splitlines() if "may be revoked" in line]
    assert len(told) == 1 and told[0].startswith("gpuallocctl: lease ")


def test_gpu_lease_warns_when_its_lease_is_idle(fast_idle_node: IdleNode, short_dir: Path) -> None:
    """`gpu_lease` warns (RuntimeWarning) that the lease is idle and may be revoked."""
    script = (
        "import os, sys, time\nfrom gpulease import gpu_lease\n"
        "with gpu_lease(1, ttl=1.5):\n"
        "    while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
    )
    output = run_until_told(fast_idle_node, [sys.executable, "-c", script], short_dir)
    assert "RuntimeWarning: gpulease: lease " in output
