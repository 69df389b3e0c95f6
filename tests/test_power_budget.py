"""The box's power budget against a real daemon on a recorded machine, as real users."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from gpulease import OverPowerBudget

from gpuallocd.allocator.power.budget import PowerBudget
from gpuallocd.errors import GpuallocError
from gpuallocd.model import PowerReading
from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.system_users import SystemUsers, open_to_everyone
from tests.test_doctor import doctor
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
        argv = allocate_argv(socket, "1")
        bob = users.start("bob", [*argv, "--wait"], short_dir / "bob.log")
        with machine.daemon.client() as root:
            wait_for(lambda: len(root.queue()) == 1, 30, what="bob waiting")
            (waiter,) = root.queue()
        assert waiter["reason"] == "Power"
        assert waiter["reason_detail"] == ("858 of 1,000 W committed: 600 W by leases, 258 W idle")
        status = users.ctl("carol", socket, "status").stdout
        assert "power: 858 of 1,000 W committed, 344 W drawn" in status
        queue = users.ctl("carol", socket, "queue", "-v").stdout
        assert "1: 858 of 1,000 W committed" in queue
        assert users.ctl("alice", socket, "free", alice["id"]).returncode == 0
        assert bob.wait(30) == 0, (short_dir / "bob.log").read_text()
        log = (short_dir / "bob.log").read_text()
        granted = json.loads(log[log.index("{") :])
        assert (granted["state"], granted["owner"]["user"]) == ("active", users.name("bob"))
    finally:
        machine.daemon.stop()


def test_a_reloaded_budget_serves_a_waiter_and_cuts_no_lease(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """bob waits for power under 1,000 W; a reload to 1,300 W serves him with nobody freeing
    anything and `status` says the new figure; a reload back to 1,000 W (1,115 W committed)
    ends neither lease, and carol's request then waits for power."""
    users = system_users
    machine = idle_machine(paths, short_dir, "wait")
    socket = machine.daemon.paths.socket
    argv = allocate_argv(socket, "1")
    carol = None
    try:
        alice = ctl_json(users, "alice", machine, "allocate", "-n", "2")
        bob = users.start("bob", [*argv, "--wait"], short_dir / "bob.log")
        with machine.daemon.client() as root:
            wait_for(lambda: len(root.queue()) == 1, 30, what="bob waiting")
            machine.daemon.reload(power_budget_watts=1300.0)
            assert bob.wait(30) == 0, (short_dir / "bob.log").read_text()
            assert "of 1,300 W committed" in users.ctl("carol", socket, "status").stdout
            machine.daemon.reload(power_budget_watts=1000.0)
            wait_for(
                lambda: "1,115 of 1,000 W committed" in users.ctl("dave", socket, "status").stdout,
                30,
                what="the budget lowered",
            )
            assert [lease.state for lease in root.leases()] == ["active", "active"]
            assert root.lease(alice["id"]).state == "active"
            carol = users.start("carol", [*argv, "--wait"], short_dir / "carol.log")
            wait_for(lambda: len(root.queue()) == 1, 30, what="carol waiting")
            (waiter,) = root.queue()
            assert (waiter["owner"]["user"], waiter["reason"]) == (users.name("carol"), "Power")
    finally:
        if carol is not None:
            carol.kill()
            carol.wait()
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


def test_a_request_no_idle_box_could_power_is_refused_at_once_naming_the_cap_that_fits(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """On the idle box, 4 GPUs at their default 300 W and the other four idle (4 x 43 W)
    commit 1,372 W over the 1,000 W budget: `run --wait` is refused at once with
    `over_power_budget`, naming --power-limit 207W; asked with it, alice is granted at once and
    her cards are set to 207 W. Eight GPUs fit at no cap the cards take: it says so."""
    users = system_users
    machine = idle_machine(paths, short_dir, "wait")
    socket = machine.daemon.paths.socket
    try:
        refused = users.ctl("alice", socket, "run", "-n", "4", "--wait", "--", "true")
        assert refused.returncode != 0
        assert refused.stderr == (
            "Error: 4 GPUs at their default 300 W commit 1,200 W (1,372 W with the other GPUs "
            "at their idle draw), over the 1,000 W power budget even with nothing else leased; "
            "--power-limit 207W would be granted now [over_power_budget]\n"
        )
        with machine.daemon.client() as root, pytest.raises(OverPowerBudget) as caught:
            root.allocate(4, wait=True, timeout=30)
        assert caught.value.details["fitting_power_limit_watts"] == 207
        with machine.daemon.client() as root:
            assert root.queue() == [] and root.leases() == []
        text = users.ctl("alice", socket, "allocate", "-n", "4", "--wait")
        assert text.returncode != 0 and "--power-limit 207W would be granted now" in text.stderr
        lease = ctl_json(users, "alice", machine, "allocate", "-n", "4", "--power-limit", "207W")
        assert lease["power_limit_watts"] == 207
        assert [limit_of(machine, g["index"]) for g in lease["gpus"]] == [207_000] * 4
        ctl_json(users, "alice", machine, "free", lease["id"])
        eight = users.ctl("bob", socket, "allocate", "-n", "8", "--wait", "--power-limit", "150W")
        assert eight.returncode != 0
        assert "even the cards' lowest limit (150 W each, 1,200 W) does not fit" in eight.stderr
    finally:
        machine.daemon.stop()


def test_a_request_for_more_gpus_than_are_free_is_refused_at_once_where_power_never_fits(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """alice holds 6 of the 8 GPUs at 150 W (986 of 1,000 W). bob's `--wait` for 7, and for 3
    at their default 300 W, could never fit even on an idle box: each is refused at once with
    `over_power_budget` (the second naming the cap that fits), not queued until GPUs come
    free; his wait for 3 at 200 W queues for GPUs."""
    users = system_users
    machine = idle_machine(paths, short_dir, "wait")
    socket = machine.daemon.paths.socket
    argv = allocate_argv(socket, "3")
    capped = None
    try:
        ctl_json(users, "alice", machine, "allocate", "-n", "6", "--power-limit", "150W")
        seven = users.ctl("bob", socket, "allocate", "-n", "7", "--wait")
        assert seven.returncode != 0
        assert "[over_power_budget]" in seven.stderr, seven.stderr
        assert "even the cards' lowest limit (150 W each, 1,050 W) does not fit" in seven.stderr
        three = users.ctl("bob", socket, "allocate", "-n", "3", "--wait")
        assert three.returncode != 0
        assert "--power-limit 261W fits once the other GPUs are idle" in three.stderr
        with machine.daemon.client() as root:
            assert root.queue() == []
            capped = users.start(
                "bob", [*argv, "--wait", "--power-limit", "200W"], short_dir / "capped.log"
            )
            wait_for(lambda: len(root.queue()) == 1, 30, what="bob's wait for 3 at 200 W")
            (waiter,) = root.queue()
            assert waiter["reason"] == "Resources", waiter
    finally:
        if capped is not None:
            capped.kill()
            capped.wait()
        machine.daemon.stop()


def test_a_wait_for_power_is_estimated_from_the_leases_whose_end_frees_enough(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """alice holds 2 GPUs for an hour: bob's wait for power is estimated to start when her
    lease expires (its end frees 2 x 257 W, more than the 158 W he lacks), in the JSON and
    in `queue`'s START; the reason reads `Power: 858 of 1,000 W committed: ...` once."""
    users = system_users
    machine = idle_machine(paths, short_dir, "wait")
    socket = machine.daemon.paths.socket
    try:
        alice = ctl_json(users, "alice", machine, "allocate", "-n", "2", "--ttl", "1h")
        argv = allocate_argv(socket, "1")
        bob = users.start("bob", [*argv, "--wait"], short_dir / "bob.log")
        with machine.daemon.client() as root:
            wait_for(lambda: len(root.queue()) == 1, 30, what="bob waiting")
            (waiter,) = root.queue()
        assert waiter["reason"] == "Power"
        assert waiter["estimated_start_at"] == alice["expires_at"]
        queue = users.ctl("carol", socket, "queue").stdout
        assert time.strftime("%H:%M", time.localtime(alice["expires_at"])) in queue
        said = "Power: 858 of 1,000 W committed: 600 W by leases, 258 W idle"
        log = short_dir / "bob.log"
        wait_for(lambda: said in log.read_text(), 30, what="bob's waiting line")
        assert "power: power" not in log.read_text().lower()
        assert users.ctl("alice", socket, "free", alice["id"]).returncode == 0
        assert bob.wait(30) == 0, (short_dir / "bob.log").read_text()
    finally:
        machine.daemon.stop()


def test_a_budget_below_the_cards_default_limits_is_warned_at_start_reload_and_by_doctor(
    paths: DaemonPaths,
) -> None:
    """The DGX-1's 8 GPUs commit 2,400 W at their default limits: a 1,000 W budget is warned
    in the start-up log, `/v1/health` and `doctor`, naming both figures; a reload to 3,000 W
    clears it, and one back to 1,000 W brings it again."""
    inventory = "nvml-recording:dgx1-volta"
    daemon = ProcessDaemon(
        paths, inventory=inventory, default_policy="simple", unleased_use="terminate"
    )
    settings = daemon.config_file.read_text()
    daemon.config_file.write_text(settings + "power_budget_watts = 1000\n")
    warning = "power_budget_watts = 1,000 W is below the 2,400 W the 8 GPUs' default power"
    daemon.start()
    try:
        with daemon.client() as client:
            assert any(warning in w for w in client.health()["config_warnings"])
            wait_for(lambda: warning in daemon.stderr(), 30, what="the warning in the log")
            checked = doctor(paths.socket)
            assert f"warn  config            {warning}" in checked.stdout
            assert "not all 8 fit even at the cards' lowest limit, 150 W" in checked.stdout
            daemon.config_file.write_text(settings + "power_budget_watts = 3000\n")
            daemon.signal(signal.SIGHUP)
            wait_for(lambda: not client.health()["config_warnings"], 30, what="the reload")
            daemon.config_file.write_text(settings + "power_budget_watts = 1000\n")
            daemon.signal(signal.SIGHUP)
            wait_for(
                lambda: any(warning in w for w in client.health()["config_warnings"]),
                30,
                what="the warning again",
            )
        assert "no warnings" not in doctor(paths.socket).stdout
    finally:
        daemon.stop()


def _budget(fit: str, budget_watts: float, cards: dict[str, tuple[int, int, int]]) -> PowerBudget:
    """A budget over cards read as {uuid: (default W, lowest W, idle W)}."""
    budget = PowerBudget(budget_watts, fit)
    budget.readings = {
        uuid: PowerReading(draw_mw=idle * 1000, default_limit_mw=full * 1000,
                           limit_mw=full * 1000, min_limit_mw=low * 1000)
        for uuid, (full, low, idle) in cards.items()
    }  # fmt: skip
    return budget


def test_with_power_fit_cap_a_request_some_cap_fits_is_not_refused_on_arrival() -> None:
    """Under `power_fit = "cap"` the arrival check refuses only what no cap fits on any
    choice: two 300 W cards capped at 150 W fit 400 W beside a 250 W card that takes no
    less than 200 W, and a card never read leaves the check to the grant; three of them
    at their lowest (450 W + the idle 30 W) are refused."""
    cards = {"a": (300, 150, 30), "b": (300, 150, 30), "c": (250, 200, 30)}
    _budget("cap", 400, cards).check_at_arrival(2, None, (), list(cards))
    _budget("cap", 400, cards).check_at_arrival(2, None, (), [*cards, "never-read"])
    with pytest.raises(GpuallocError) as refused:
        _budget("cap", 400, cards).check_at_arrival(3, None, (), list(cards))
    assert refused.value.code == "over_power_budget"


def allocate_argv(socket: Path, count: str) -> list[str]:
    """`gpuallocctl --json allocate -n COUNT` on `socket`, for `SystemUsers.start` (which
    puts the Python first)."""
    return ["-m", "gpuallocd.cli", "--socket", str(socket), "--json", "allocate", "-n", count]
