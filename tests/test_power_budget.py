"""The box's power budget against a real daemon on a recorded machine, as real users."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import DaemonPaths, wait_for
from tests.system_users import SystemUsers, open_to_everyone
from tests.test_energy_leases import Machine, ctl_json
from tests.test_power_caps import limit_of


def idle_machine(paths: DaemonPaths, short_dir: Path, fit: str) -> Machine:
    """The DGX-1 with its GPUs idle (43 W each) and a budget of 1,000 W."""
    open_to_everyone(short_dir)
    machine = Machine(paths, energy_interval_seconds=0.05, power_budget_watts=1000, power_fit=fit)
    for uuid in machine.fake.uuids():
        machine.fake.set_utilization(uuid, 0)
    machine.fake.nvmlInit()
    machine.daemon.start()
    return machine


def test_a_request_over_the_power_budget_waits_with_the_reason_and_is_served_later(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """alice's two GPUs commit 2 x 300 W, the six idle ones 6 x 43 W: 858 of 1,000 W. bob's
    GPU would commit 300 W more: he waits, the queue and `status` say why; once alice frees
    a GPU he is served."""
    users = system_users
    machine = idle_machine(paths, short_dir, "wait")
    socket = machine.daemon.paths.socket
    try:
        alice = ctl_json(users, "alice", machine, "allocate", "-n", "2")
        argv = ["-m", "gpuallocd.cli", "--socket", str(socket), "--json", "allocate", "-n", "1"]
        bob = users.start("bob", [*argv, "--wait"], short_dir / "bob.log")
        with machine.daemon.client() as root:
            wait_for(lambda: len(root.queue()) == 1, 30, what="bob waiting")
            (waiter,) = root.queue()
        assert waiter["reason"] == "Power"
        assert waiter["reason_detail"] == (
            "power: 858 of 1,000 W committed: 600 W by leases, 258 W idle"
        )
        status = users.ctl("carol", socket, "status").stdout
        assert "power: 858 of 1,000 W committed, 344 W drawn" in status
        queue = users.ctl("carol", socket, "queue", "-v").stdout
        assert "power: 858 of 1,000 W committed" in queue
        assert users.ctl("alice", socket, "free", alice["id"]).returncode == 0
        assert bob.wait(30) == 0, (short_dir / "bob.log").read_text()
        log = (short_dir / "bob.log").read_text()
        granted = json.loads(log[log.index("{") :])
        assert (granted["state"], granted["owner"]["user"]) == ("active", users.name("bob"))
    finally:
        machine.daemon.stop()


def test_with_power_fit_cap_a_request_over_the_budget_gets_a_lower_cap(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """With `power_fit = "cap"`, bob's GPU is granted at once with the 185 W left."""
    users = system_users
    machine = idle_machine(paths, short_dir, "cap")
    try:
        ctl_json(users, "alice", machine, "allocate", "-n", "2")
        bob = ctl_json(users, "bob", machine, "allocate", "-n", "1")
        assert bob["power_limit_watts"] == 185
        assert limit_of(machine, bob["gpus"][0]["index"]) == 185_000
        power = ctl_json(users, "carol", machine, "status")["power"]
        assert (power["committed_watts"], power["budget_watts"]) == (1000.0, 1000.0)
    finally:
        machine.daemon.stop()
