"""Power caps of leases against a real daemon on a recorded machine, as real users: set for
the lease, put back at its end, also after the daemon was killed, set again after a driver
reload; the site's default and a user's maximum."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpulease import DaemonUnavailable

from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.ledger_damage import CRASH_ENV
from tests.system_users import SystemUsers, open_to_everyone
from tests.test_energy_leases import Machine, ctl_json

DEFAULT_MW = 300_000  # a V100-SXM2's default (and highest) power limit
SHORT_CAPPED_LEASE = """
import json, sys
from gpulease import Client
print(json.dumps(Client(sys.argv[1]).allocate(1, ttl=3, power_limit_watts=170).raw))
"""


def limit_of(machine: Machine, index: int) -> int:
    handle = machine.fake.nvmlDeviceGetHandleByIndex(index)
    return int(machine.fake.nvmlDeviceGetPowerManagementLimit(handle))


def started(
    paths: DaemonPaths, short_dir: Path, config: str | None = None, **settings: Any
) -> Machine:
    open_to_everyone(short_dir)
    machine = Machine(paths, config, energy_interval_seconds=0.05, **settings)
    machine.fake.nvmlInit()  # the test reads the fake too
    machine.daemon.start()
    return machine


def test_a_cap_is_set_for_the_lease_put_back_at_its_end_and_set_again_after_a_reload(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """alice asks for 200 W: her GPU is capped (and draws less), a driver reload's default is
    replaced by her cap again, and at her lease's end the GPU has its 300 W back."""
    users = system_users
    machine = started(paths, short_dir)
    try:
        lease = ctl_json(users, "alice", machine, "allocate", "-n", "1", "--power-limit", "200W")
        index = lease["gpus"][0]["index"]
        assert lease["power_limit_watts"] == 200
        assert limit_of(machine, index) == 200_000
        handle = machine.fake.nvmlDeviceGetHandleByIndex(index)
        assert machine.fake.nvmlDeviceGetPowerUsage(handle) == 200_000  # full load, capped
        machine.fake.reload_driver()
        assert limit_of(machine, index) == DEFAULT_MW
        wait_for(lambda: limit_of(machine, index) == 200_000, 30, what="the cap set again")
        assert users.ctl("alice", machine.daemon.paths.socket, "free", lease["id"]).returncode == 0
        wait_for(lambda: limit_of(machine, index) == DEFAULT_MW, 30, what="the limit put back")
    finally:
        machine.daemon.stop()


def test_the_site_default_applies_and_a_user_maximum_bounds_what_may_be_asked(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """With `lease_power_limit_watts = 250`, a lease asking nothing gets 250 W; bob, whose
    maximum is 180 W, gets 180 W by default and is refused 250 W; a cap below the card's
    range is kept within it."""
    users = system_users
    config = f"[limits.user.{users.name('bob')}]\nmax_power_limit_watts = 180\n"
    machine = started(paths, short_dir, config, lease_power_limit_watts=250)
    socket = machine.daemon.paths.socket
    try:
        plain = ctl_json(users, "alice", machine, "allocate", "-n", "1")
        assert limit_of(machine, plain["gpus"][0]["index"]) == 250_000
        bobs = ctl_json(users, "bob", machine, "allocate", "-n", "1")
        assert limit_of(machine, bobs["gpus"][0]["index"]) == 180_000
        refused = users.ctl("bob", socket, "allocate", "-n", "1", "--power-limit", "250W")
        assert refused.returncode != 0 and "max_power_limit_watts = 180" in refused.stderr
        low = ctl_json(users, "carol", machine, "allocate", "-n", "1", "--power-limit", "100")
        assert limit_of(machine, low["gpus"][0]["index"]) == 150_000  # the card's lowest
        bad = users.ctl("carol", socket, "allocate", "-n", "1", "--power-limit", "-5W")
        assert bad.returncode != 0 and "not a power limit" in bad.stderr
    finally:
        machine.daemon.stop()


def _limits(path: Path) -> Callable[[], dict[str, int]]:
    def read() -> dict[str, int]:
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return {}

    return read


def test_a_cap_is_put_back_after_the_daemon_was_killed(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """kill -9 while a capped lease runs; it expires while the daemon is down; the daemon that
    starts again puts the GPU's previous limit back (the ledger remembered it)."""
    users = system_users
    open_to_everyone(short_dir)
    live = short_dir / "live.json"
    live.write_text("{}")
    limits = _limits(short_dir / "live.json.limits")
    inventory = f"nvml-recording:dgx1-volta?live={live}"
    settings = {"default_policy": "simple", "energy_interval_seconds": 0.05}
    daemon = ProcessDaemon(paths, inventory=inventory, **settings).start()
    try:
        socket = paths.socket
        done = users.run("alice", ["-c", SHORT_CAPPED_LEASE, str(socket)])
        assert done.returncode == 0, done.stderr
        lease = json.loads(done.stdout)
        uuid = lease["gpus"][0]["uuid"]
        assert limits()[uuid] == 170_000
        daemon.signal(signal.SIGKILL)
        assert daemon.process is not None
        daemon.process.wait(10)
        time.sleep(3.5)  # the lease's TTL passes while no daemon runs
        assert limits()[uuid] == 170_000  # the card kept the cap
        daemon = ProcessDaemon(paths, inventory=inventory, initialise=False, **settings).start()
        wait_for(lambda: limits().get(uuid) == DEFAULT_MW, 30, what="the limit put back")
        with daemon.client() as client:
            assert client.lease(lease["id"]).state == "expired"
    finally:
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.kill()


def test_run_caps_its_gpu_while_the_command_runs(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """`gpuallocctl run --power-limit 200W` (through gpu_lease's power_limit): the GPU is capped
    while the command runs and has its limit back once it exited."""
    users = system_users
    machine = started(paths, short_dir)
    go = short_dir / "go"
    wait = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)"
    argv = ["-m", "gpuallocd.cli", "--socket", str(machine.daemon.paths.socket), "run"]
    argv += ["--gpu", "0", "--power-limit", "200W", "--", users.python, "-c", wait]
    command = users.start("alice", argv, short_dir / "run.log")
    try:
        wait_for(lambda: limit_of(machine, 0) == 200_000, 30, what="the cap while it runs")
        go.touch()
        assert command.wait(30) == 0, (short_dir / "run.log").read_text()
        wait_for(lambda: limit_of(machine, 0) == DEFAULT_MW, 30, what="the limit put back")
    finally:
        go.touch()
        command.wait(30)
        machine.daemon.stop()


def test_hostile_power_limits_are_refused_and_change_nothing(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """A power limit that is not a whole positive number of watts is `invalid_request`, and no
    GPU's limit moves; a huge one is kept within the card's range; `usage --user` of a user
    the machine does not know answers (no budgets) instead of failing."""
    machine = started(paths, short_dir)
    try:
        with machine.daemon.client() as root:
            for bad in (0, -250, True, 2.5, "250W", [250], 100_001, 10**400):
                try:
                    root.request("POST", "/v1/leases", {"count": 1, "power_limit_watts": bad})
                except Exception as exc:  # the client's InvalidRequest, or a JSON refusal
                    assert "power_limit_watts" in str(exc) or "JSON" in str(exc), exc
                else:
                    raise AssertionError(f"{bad!r} was accepted")
            assert root.leases() == []
            assert [limit_of(machine, i) for i in range(8)] == [DEFAULT_MW] * 8
            huge = root.allocate(1, power_limit_watts=5000)
            assert limit_of(machine, huge.gpus[0].index) == DEFAULT_MW  # the card's highest
            report = root.request("GET", "/v1/usage?since=0&user=nosuchuser-e31")
            assert report["budgets"] is None
    finally:
        machine.daemon.stop()


def test_a_daemon_killed_once_a_cap_is_recorded_sets_it_at_its_next_start(
    short_dir: Path, paths: DaemonPaths
) -> None:
    """A grant with a 170 W cap is durable, and the daemon is killed (SIGKILL) before it sets
    the cap or answers: the restarted daemon answers the retry with the same lease, its cap
    shown (kept by the ledger's records, not the lease row), sets the cap, and puts the
    limit back after its end."""
    live = short_dir / "live.json"
    live.write_text("{}")
    limits = _limits(short_dir / "live.json.limits")
    inventory = f"nvml-recording:dgx1-volta?live={live}"
    settings = {"default_policy": "simple", "energy_interval_seconds": 0.05}
    os.environ.update({**CRASH_ENV, "GPUALLOCD_TEST_CRASH_AT": "cap-recorded"})
    daemon = ProcessDaemon(paths, inventory=inventory, **settings).start()
    with daemon.client(timeout=30) as client, pytest.raises(DaemonUnavailable):
        client.allocate(1, power_limit_watts=170, request_id="capped")
    assert daemon.process is not None and daemon.process.wait(30) == -9
    for key in (*CRASH_ENV, "GPUALLOCD_TEST_CRASH_AT"):
        os.environ.pop(key, None)
    daemon = ProcessDaemon(paths, inventory=inventory, initialise=False, **settings).start()
    try:
        with daemon.client() as client:
            lease = client.allocate(1, power_limit_watts=170, request_id="capped")
            assert [held.id for held in client.leases()] == [lease.id]
            assert [held.raw["power_limit_watts"] for held in client.leases()] == [170]
            assert lease.raw["power_limit_watts"] == 170
            uuid = lease.gpus[0].uuid
            wait_for(lambda: limits().get(uuid) == 170_000, 30, what="the cap set at start")
            client.free(lease.id)
            wait_for(lambda: limits().get(uuid) == DEFAULT_MW, 30, what="the limit put back")
    finally:
        daemon.stop()


def test_caps_asked_in_a_loop_slow_nobody_else(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """A client grants GPU 0 in a loop with a cap that changes every time, so that each grant
    sets a limit: the driver is called for those changes and no more, live samples go on
    between the sets, and another client's allocate+free (no cap: no driver call) is served
    meanwhile."""
    machine = started(paths, short_dir)
    sets, reads = "nvmlDeviceSetPowerManagementLimit", "nvmlDeviceGetTotalEnergyConsumption"
    try:
        with machine.daemon.client() as looping, machine.daemon.client() as other:
            before = machine.fake.calls[sets]
            sampled = machine.fake.calls[reads]
            served = []
            for n in range(40):
                lease = looping.allocate(gpus=[0], power_limit_watts=200 + 10 * (n % 2))
                looping.free(lease.id)
                if n == 20:
                    plain = other.allocate(gpus=[1])
                    served.append(other.free(plain.id).state)
            assert served == ["freed"]
            # one set per grant (each a new cap), at most one put-back per lease besides (a
            # put-back comes a second after the end, unless the next grant came first)
            assert 40 <= machine.fake.calls[sets] - before <= 80
            assert machine.fake.calls[reads] > sampled  # samples went on meanwhile
    finally:
        machine.daemon.stop()


def test_leases_that_keep_a_cap_close_together_set_it_once(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """A client grants GPU 0 at 200 W and frees it in a loop for two and a half seconds, each
    next lease soon after the last end: the cap is set once and not put back between leases
    (each end's put-back, a second later, finds that a next lease kept the cap and has ended
    since: that end's own put-back is to do it), save across a pause of the loop near that
    second (a slow machine); after the last end the limit is put back."""
    machine = started(paths, short_dir)
    sets = "nvmlDeviceSetPowerManagementLimit"
    try:
        with machine.daemon.client() as looping:
            before = machine.fake.calls[sets]
            pauses, ended_at = 0, None
            started_at = time.monotonic()
            while time.monotonic() - started_at < 2.5:
                lease = looping.allocate(gpus=[0], power_limit_watts=200)
                if ended_at is not None and time.monotonic() - ended_at > 0.8:
                    pauses += 1  # a put-back may have come: a set and a put-back more
                looping.free(lease.id)
                ended_at = time.monotonic()
            assert machine.fake.calls[sets] - before <= 1 + 2 * pauses
        wait_for(lambda: limit_of(machine, 0) == DEFAULT_MW, 30)
    finally:
        machine.daemon.stop()


def test_a_cap_outside_the_cards_range_is_granted_as_set_and_said_so(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """`--power-limit 60W` on a 150-300 W card sets 150 W: the answer's `power_limit_watts`
    is 150 with `power_limit_requested_watts` 60, `allocate` and `run` say it in a line, and
    `leases` (its CAP column and --json) show the 150 W set."""
    users = system_users
    machine = started(paths, short_dir)
    socket = machine.daemon.paths.socket
    said = "power capped at 150 W per GPU (60 W asked: the cards take no less)"
    try:
        lease = ctl_json(users, "alice", machine, "allocate", "-n", "1", "--power-limit", "60W")
        assert (lease["power_limit_watts"], lease["power_limit_requested_watts"]) == (150, 60)
        assert limit_of(machine, lease["gpus"][0]["index"]) == 150_000
        text = users.ctl("bob", socket, "allocate", "-n", "1", "--power-limit", "60W")
        assert text.returncode == 0 and said in text.stdout.splitlines()
        plain = ctl_json(users, "carol", machine, "allocate", "-n", "1", "--power-limit", "200W")
        assert plain["power_limit_requested_watts"] is None
        listed = ctl_json(users, "alice", machine, "leases")["leases"]
        caps = {held["id"]: held["power_limit_watts"] for held in listed}
        assert caps[lease["id"]] == 150 and caps[plain["id"]] == 200
        table = users.ctl("alice", socket, "leases").stdout.splitlines()
        assert "CAP" in table[0].split()
        row = next(line for line in table if line.startswith(lease["id"]))
        assert "150 W" in row
        ran = users.ctl("dave", socket, "run", "-n", "1", "--power-limit", "60W", "--", "true")
        assert ran.returncode == 0 and said in ran.stderr
    finally:
        machine.daemon.stop()


@pytest.mark.parametrize("columns", [80, 160])
def test_status_shows_each_gpus_draw_and_cap_within_the_terminal(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths, columns: int
) -> None:
    """alice's GPU capped at 200 W under full load: `status` gives each GPU a POWER column
    (draw/limit from the last reading, `200/200 W` for hers, `300/300 W` for the others)
    at 160 columns, every line within the terminal at 80 and 160; `--json` has the figures."""
    from tests.test_cli_widths import on_terminal

    users = system_users
    machine = started(paths, short_dir)
    socket = machine.daemon.paths.socket
    try:
        lease = ctl_json(users, "alice", machine, "allocate", "--gpu", "0", "--power-limit", "200W")
        assert lease["power_limit_watts"] == 200

        def power_of(index: int) -> Any:
            gpus = ctl_json(users, "carol", machine, "status")["gpus"]
            return next(g["power"] for g in gpus if g["index"] == index)

        wait_for(lambda: power_of(0)["draw_watts"] == 200, 30, what="the capped draw read")
        assert power_of(0)["limit_watts"] == 200 and power_of(1)["limit_watts"] == 300
        lines = on_terminal(socket, columns, "status")
        assert max(len(line) for line in lines) <= columns, "\n".join(lines)
        if columns == 160:
            assert "POWER" in lines[1].split()
            rows = {line.split()[0]: line for line in lines[2:] if line.split()[0].isdigit()}
            assert "200/200 W" in rows["0"] and "300/300 W" in rows["1"]
            assert users.name("alice") in rows["0"]
    finally:
        machine.daemon.stop()


def test_a_power_limit_has_one_upper_bound_for_the_cli_the_api_and_the_agents() -> None:
    """`--power-limit`, `power_limit_watts` in the API and the MCP `allocate` tool's schema
    all stop at the same number of watts (they said 999,999, 100,000 and 999,999)."""
    from gpulease.sizes import MAX_POWER_LIMIT_WATTS, parse_watts

    from gpuallocd.api import routes
    from gpuallocd.mcp import catalog

    assert parse_watts(f"{MAX_POWER_LIMIT_WATTS}W") == MAX_POWER_LIMIT_WATTS
    with pytest.raises(ValueError, match=f"1 to {MAX_POWER_LIMIT_WATTS:,} W"):
        parse_watts(f"{MAX_POWER_LIMIT_WATTS + 1}W")
    assert routes.MAX_POWER_LIMIT_WATTS == MAX_POWER_LIMIT_WATTS
    assert catalog._POWER["power_limit_watts"]["maximum"] == MAX_POWER_LIMIT_WATTS
