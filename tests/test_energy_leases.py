"""Energy per lease against a real daemon on a recorded machine, as real users.

The recorded machine's energy counters advance with a clock the test moves by hand, so the
energy each lease drew is exact: a V100 of `dgx1-volta` at full load draws its 300 W limit.
"""

from __future__ import annotations

import grp
import json
import pwd
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuallocd.inventory import Inventory
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.testing import FakeNvml
from tests.harness import DaemonPaths, HandClock, ThreadDaemon, wait_for
from tests.rules_harness import daemon_with_config
from tests.system_users import SystemUsers, open_to_everyone

FULL_LOAD_W = 300.0  # a V100-SXM2's default power limit, drawn at 100 % utilisation


class Machine:
    """A daemon on the recorded DGX-1 whose energy runs on a hand clock."""

    def __init__(self, paths: DaemonPaths, config: str | None = None, **settings: Any) -> None:
        """`config`: the text of a config file (limits), read as the daemon reads one."""
        self.clock = HandClock()
        self.fake = FakeNvml.from_recording("dgx1-volta", clock=self.clock)
        for uuid in self.fake.uuids():
            self.fake.set_utilization(uuid, 100)
        settings.update(inventory="nvml-recording:dgx1-volta", default_policy="simple")
        settings.setdefault("sample_interval_seconds", 0.1)
        if config is None:
            self.daemon = ThreadDaemon(paths, inventory_opener=self._open, **settings)
        else:
            self.daemon = daemon_with_config(paths, config, inventory_opener=self._open, **settings)

    def _open(self, spec: str) -> Inventory:
        return NvmlInventory(nvml=self.fake, name=self.fake.name, xid_wait_ms=20)

    def step(self, seconds: float) -> None:
        """The GPUs' clock moves on `seconds`, and a whole live sample that read their
        counters after it has been taken in (a grant or an end takes the counters of the
        last sample applied): samples are read and applied one after the other, so once the
        sample after a whole one has begun to read, the whole one was applied (one sample
        may straddle the step)."""
        reads = "nvmlDeviceGetTotalEnergyConsumption"
        self.clock.step(seconds)
        after = self.fake.calls[reads] + 2 * len(self.fake.uuids()) + 1
        wait_for(lambda: self.fake.calls[reads] >= after, 30, what="a sample after the step")


@pytest.fixture
def machine(system_users: SystemUsers, short_dir: Path, paths: DaemonPaths) -> Iterator[Machine]:
    open_to_everyone(short_dir)
    metrics = str(paths.root / "metrics.prom")
    found = Machine(
        paths, energy_interval_seconds=0.05, metrics_textfile=metrics, sample_interval_seconds=0.1
    )
    found.daemon.start()
    yield found
    found.daemon.stop()


def ctl_json(users: SystemUsers, who: str, machine: Machine, *args: str) -> Any:
    done = users.ctl(who, machine.daemon.paths.socket, "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def end_event(
    users: SystemUsers, machine: Machine, lease_id: str, joules: float | None = None
) -> dict[str, Any]:
    """The lease's end event, once the energy its end read is recorded (within a second):
    once it shows `joules`, where given."""
    found: list[dict[str, Any]] = []

    def recorded() -> bool:
        answer = ctl_json(users, "alice", machine, "history", "--lease", lease_id)
        found[:] = [e for e in answer["events"] if e["event"] in ("freed", "revoked", "expired")]
        energy = found[0]["energy"] if len(found) == 1 else None
        if energy is None:
            return False
        return joules is None or bool(energy["joules"] == pytest.approx(joules))

    wait_for(recorded, 30, what="the end's energy recorded")
    return dict(found[0])


def users_usage(users: SystemUsers, machine: Machine, who: str = "carol") -> dict[str, Any]:
    report = ctl_json(users, who, machine, "usage", "--since", "1d")
    return {u["user"]: u for u in report["users"]}


def test_a_whole_gpu_lease_is_charged_its_measured_energy(
    system_users: SystemUsers, machine: Machine
) -> None:
    """alice holds one V100 at full load for an hour of the GPU's clock: 0.3 kWh, measured,
    in the end event, `history` and `usage`; bob, who held nothing, drew nothing."""
    users = system_users
    lease = ctl_json(users, "alice", machine, "allocate", "-n", "1", "--ttl", "8h")
    machine.step(3600)
    assert users.ctl("alice", machine.daemon.paths.socket, "free", lease["id"]).returncode == 0
    energy = end_event(users, machine, lease["id"], FULL_LOAD_W * 3600)["energy"]
    assert energy == {"joules": FULL_LOAD_W * 3600, "kwh": 0.3, "estimate": False}
    with machine.daemon.client() as root:  # the holder's own stream of its lease's events
        _, events, _ = root.lease_events(lease["id"])
    assert [e["energy"] for e in events if e["event"] == "freed"] == [energy]
    by_user = users_usage(users, machine)
    alice = by_user[users.name("alice")]
    assert (alice["energy_kwh"], alice["energy_estimate"]) == (0.3, False)
    assert users.name("bob") not in by_user
    report = ctl_json(users, "carol", machine, "usage", "--since", "1d")
    group = grp.getgrgid(pwd.getpwnam(users.name("alice")).pw_gid).gr_name
    (alices,) = [g for g in report["groups"] if g["group"] == group]
    assert (alices["energy_kwh"], alices["users"]) == (0.3, 1)
    assert (
        "groups (each user in their primary group)"
        in users.ctl("carol", machine.daemon.paths.socket, "usage", "--since", "1d").stdout
    )
    text = users.ctl("alice", machine.daemon.paths.socket, "history", "--lease", lease["id"])
    assert "0.300" in text.stdout and "estimate" not in text.stdout
    metric = f'gpuallocd_energy_joules_total{{user="{users.name("alice")}"}} 1.08e+06'
    metrics = machine.daemon.paths.root / "metrics.prom"
    wait_for(lambda: metrics.exists() and metric in metrics.read_text(), 30, what=metric)


def test_the_energy_timer_charges_a_running_lease_and_a_driver_reload_costs_no_more(
    system_users: SystemUsers, machine: Machine
) -> None:
    """The timer's readings charge a running lease; a driver reload (the counter starts again
    at 0) is not negative energy: what was read before it and what the counter counted since
    both count."""
    users = system_users
    lease = ctl_json(users, "bob", machine, "allocate", "-n", "2", "--ttl", "8h")
    machine.step(100)

    def bob_kwh() -> float:
        return float(users_usage(users, machine).get(users.name("bob"), {}).get("energy_kwh", 0))

    two_gpus_100s = 2 * FULL_LOAD_W * 100 / 3.6e6
    wait_for(lambda: bob_kwh() == pytest.approx(two_gpus_100s), 30, what="the timer's reading")
    machine.fake.reload_driver()
    machine.step(50)
    assert users.ctl("bob", machine.daemon.paths.socket, "free", lease["id"]).returncode == 0
    energy = end_event(users, machine, lease["id"], 2 * FULL_LOAD_W * 150)["energy"]
    assert energy["joules"] == pytest.approx(2 * FULL_LOAD_W * 150)
    assert energy["estimate"] is False


def test_a_gpu_shared_by_memory_is_an_estimate_by_its_share(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """Two shares of one GPU are each charged their part of its memory times its energy, and
    the figure says it is an estimate wherever it is shown."""
    open_to_everyone(short_dir)
    machine = Machine(paths, shared_gpus=["all"], share_memory_reserve_bytes=0)
    machine.daemon.start()
    users = system_users
    try:
        total = machine.fake.recording["devices"][0]["memory_total_bytes"]
        lease = ctl_json(users, "carol", machine, "allocate", "--memory", f"{total // 4}B")
        machine.step(3600)
        socket = machine.daemon.paths.socket
        assert users.ctl("carol", socket, "free", lease["id"]).returncode == 0
        energy = end_event(users, machine, lease["id"])["energy"]
        assert energy["estimate"] is True
        assert energy["kwh"] == pytest.approx(0.3 * (total // 4) / total)
        carol = users_usage(users, machine)[users.name("carol")]
        assert carol["energy_estimate"] is True
        text = users.ctl("carol", socket, "usage", "--since", "1d").stdout
        assert "(estimate)" in text
    finally:
        machine.daemon.stop()


def test_unleased_use_is_charged_to_its_owner_in_a_column_of_its_own(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """carol runs on a GPU nobody leased: its GPU time and energy are hers, as unleased use,
    not as leased energy; with `fair_share_unleased = "count"` fair share counts the time."""
    open_to_everyone(short_dir)
    machine = Machine(
        paths,
        energy_interval_seconds=0.05,
        sample_interval_seconds=0.05,
        fair_share_unleased="count",
    )
    machine.daemon.start()
    users = system_users
    worker = users.start("carol", ["-c", "import time; time.sleep(600)"], short_dir / "c.log")
    try:
        machine.fake.set_processes(machine.fake.uuids()[5], [(worker.pid, 2**30)])

        def carol() -> dict[str, Any]:
            return dict(users_usage(users, machine).get(users.name("carol"), {}))

        wait_for(lambda: carol().get("unleased_gpu_hours", 0) > 0, 30, what="a first reading")
        machine.step(600)
        expected = FULL_LOAD_W * 600 / 3.6e6
        wait_for(
            lambda: carol()["unleased_energy_kwh"] == pytest.approx(expected),
            30,
            what="carol's unleased energy",
        )
        assert carol()["energy_kwh"] == 0
        assert carol()["decayed_gpu_hours"] > 0  # fair share counts it, as the site asked
        text = users.ctl("carol", machine.daemon.paths.socket, "usage", "--since", "1d").stdout
        assert "used without a lease" in text and f"{expected:.3f}" in text
    finally:
        worker.kill()
        worker.wait()
        machine.daemon.stop()
