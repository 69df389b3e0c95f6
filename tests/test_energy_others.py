"""Energy on a GPU that other users' processes use: charged to whose processes use it, by
memory share, never to the holder for another user's draw; and the power budget names the
watts drawn without a lease and by whom. Real users, real processes listed by the recorded
NVML machine as using its GPUs, a real daemon (docs/accounting.md, Others on a leased GPU)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonPaths, wait_for
from tests.system_users import SystemUsers, open_to_everyone
from tests.test_energy_leases import FULL_LOAD_W, Machine, ctl_json, end_event, users_usage

GIB = 2**30
SLEEPER = "import time; time.sleep(600)"
HOUR_KWH = FULL_LOAD_W * 3600 / 3.6e6  # a V100 at full load for an hour: 0.3 kWh


class Users:
    """The processes a test starts as real users, stopped at its end."""

    def __init__(self, users: SystemUsers, root: Path) -> None:
        self.users = users
        self.root = root
        self.started: list[subprocess.Popen[str]] = []

    def process(self, who: str, env: dict[str, str] | None = None) -> int:
        """A live process of `who` (`env`: more variables in its environment); its pid."""
        log = self.root / f"{who}-{len(self.started)}.log"
        started = self.users.start(who, ["-c", SLEEPER], log, env)
        self.started.append(started)
        return started.pid

    def stop(self) -> None:
        for started in self.started:
            started.kill()
            started.wait()


@pytest.fixture
def processes(system_users: SystemUsers, short_dir: Path) -> Iterator[Users]:
    found = Users(system_users, short_dir)
    yield found
    found.stop()


def budgets_machine(paths: DaemonPaths, short_dir: Path, users: SystemUsers) -> Machine:
    """The DGX-1 on a fast energy timer, alice and bob each with 0.25 kWh a day; only GPU 0
    runs (bob's work on it), the others idle."""
    open_to_everyone(short_dir)
    config = "".join(
        f"[limits.user.{users.name(who)}]\nmax_kwh_per_day = 0.25\n" for who in ("alice", "bob")
    )
    machine = Machine(paths, config, energy_interval_seconds=0.05, sample_interval_seconds=0.05)
    for uuid in machine.fake.uuids()[1:]:
        machine.fake.set_utilization(uuid, 0)
    return machine


def usage_of(users: SystemUsers, machine: Machine, who: str) -> dict[str, Any]:
    return dict(users_usage(users, machine).get(users.name(who), {}))


def test_bobs_draw_on_alices_idle_lease_is_charged_to_bob_not_alice(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths, processes: Users
) -> None:
    """alice leases GPU 0 and leaves it idle; bob runs on it flat out for an hour without a
    lease, his process naming her lease id and GPU in its environment: the 0.3 kWh are bob's
    (unleased use), alice's lease drew nothing of it, her next grant passes her kWh budget,
    and bob's own budget now refuses him."""
    users = system_users
    machine = budgets_machine(paths, short_dir, users)
    machine.daemon.start()
    socket = machine.daemon.paths.socket
    try:
        lease = ctl_json(users, "alice", machine, "allocate", "--gpu", "0", "--ttl", "8h")
        gpu = machine.fake.uuids()[0]
        hers = {"GPUALLOCD_LEASE_ID": lease["id"], "CUDA_VISIBLE_DEVICES": gpu}
        machine.fake.set_processes(gpu, [(processes.process("bob", hers), GIB)])
        wait_for(
            lambda: usage_of(users, machine, "bob").get("unleased_gpu_hours", 0) > 0,
            30,
            what="a first reading that charges bob for his use of alice's GPU",
        )
        machine.step(3600)
        assert users.ctl("alice", socket, "free", lease["id"]).returncode == 0
        energy = end_event(users, machine, lease["id"])["energy"]
        assert (energy["joules"], energy["estimate"]) == (0.0, True)
        alice, bob = usage_of(users, machine, "alice"), usage_of(users, machine, "bob")
        assert alice.get("energy_kwh", 0) == 0 and alice.get("unleased_energy_kwh", 0) == 0
        assert bob["unleased_energy_kwh"] == pytest.approx(HOUR_KWH)
        assert ctl_json(users, "alice", machine, "allocate", "-n", "1")["state"] == "active"
        refused = users.ctl("bob", socket, "allocate", "-n", "1")
        assert refused.returncode != 0
        assert "0.300 kWh of 0.25 in the last 1 day(s): max_kwh_per_day" in refused.stderr
    finally:
        machine.daemon.stop()


def test_the_holder_and_another_user_share_a_gpu_by_the_memory_their_processes_use(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths, processes: Users
) -> None:
    """alice runs 1 GiB on her leased GPU 0, bob 3 GiB beside her: of the hour's 0.3 kWh her
    lease is charged a quarter and bob three quarters, both labelled estimates."""
    users = system_users
    machine = budgets_machine(paths, short_dir, users)
    machine.daemon.start()
    socket = machine.daemon.paths.socket
    try:
        lease = ctl_json(users, "alice", machine, "allocate", "--gpu", "0", "--ttl", "8h")
        on_gpu = [(processes.process("alice"), GIB), (processes.process("bob"), 3 * GIB)]
        machine.fake.set_processes(machine.fake.uuids()[0], on_gpu)
        wait_for(
            lambda: usage_of(users, machine, "bob").get("unleased_gpu_hours", 0) > 0,
            30,
            what="a first reading that sees both",
        )
        machine.step(3600)
        assert users.ctl("alice", socket, "free", lease["id"]).returncode == 0
        energy = end_event(users, machine, lease["id"], HOUR_KWH / 4 * 3.6e6)["energy"]
        assert energy["kwh"] == pytest.approx(HOUR_KWH / 4) and energy["estimate"] is True
        bob = usage_of(users, machine, "bob")
        assert bob["unleased_energy_kwh"] == pytest.approx(3 * HOUR_KWH / 4)
    finally:
        machine.daemon.stop()


def test_a_power_refusal_names_the_watts_drawn_without_a_lease_and_by_whom(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths, processes: Users
) -> None:
    """bob runs flat out on free GPU 2 without a lease (300 W), alice holds GPU 0 (300 W),
    five GPUs idle at 43 W: alice's next GPU would pass the 1,000 W budget, and the refusal
    and the queue say that 300 W of it are drawn without a lease by bob on GPU 2."""
    users = system_users
    open_to_everyone(short_dir)
    machine = Machine(
        paths,
        energy_interval_seconds=0.05,
        sample_interval_seconds=0.05,
        power_budget_watts=1000,
    )
    uuids = machine.fake.uuids()
    for uuid in uuids:
        machine.fake.set_utilization(uuid, 100 if uuid == uuids[2] else 0)
    machine.daemon.start()
    socket = machine.daemon.paths.socket
    try:
        bob = processes.process("bob")
        machine.fake.set_processes(uuids[2], [(bob, GIB)])
        with machine.daemon.client() as root:
            wait_for(
                lambda: any(e["pid"] == bob for e in root.unleased()["events"]),
                30,
                what="bob's use reported",
            )
        ctl_json(users, "alice", machine, "allocate", "--gpu", "0")
        wait_for(
            lambda: "601 W drawn" in users.ctl("carol", socket, "status").stdout,
            30,
            what="the drawn watts read",
        )
        refused = users.ctl("alice", socket, "allocate", "--gpu", "1")
        assert refused.returncode != 0
        said = (
            "power: 858 of 1,000 W committed: 300 W by leases, 300 W drawn without a lease by "
            f"{users.name('bob')} on GPU 2, 258 W idle"
        )
        assert said in refused.stderr
        argv = ["-m", "gpuallocd.cli", "--socket", str(socket), "allocate", "--gpu", "1"]
        processes.started.append(users.start("alice", [*argv, "--wait"], short_dir / "a.log"))
        with machine.daemon.client() as root:
            wait_for(lambda: len(root.queue()) == 1, 30, what="alice waiting")
            (waiter,) = root.queue()
        assert (waiter["reason"], waiter["reason_detail"]) == ("Power", said[len("power: ") :])
    finally:
        machine.daemon.stop()
