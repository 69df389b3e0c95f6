"""Budgets of GPU-hours and kWh per rolling window, against a real daemon, as real users."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.harness import DaemonPaths, wait_for
from tests.system_users import SystemUsers, open_to_everyone
from tests.test_energy_leases import Machine, ctl_json

ASK = """
import json, sys
from gpulease import Client, QuotaExceeded
try:
    Client(sys.argv[1]).allocate(count=1)
except QuotaExceeded as exc:
    print(json.dumps(exc.details))
"""


def test_a_request_over_a_kwh_budget_is_refused_and_a_running_lease_is_not_cut(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """alice may use 0.25 kWh a day; after an hour of a V100 at full load (0.3 kWh) her next
    request is refused, naming the budget, her use and when enough frees up; her running
    lease stays and renews; `limits` shows what remains; bob, without the budget, is served."""
    users = system_users
    open_to_everyone(short_dir)
    config = (
        f"[limits.user.{users.name('alice')}]\nmax_kwh_per_day = 0.25\n"
        "max_gpu_hours_per_week = 100\n"
    )
    machine = Machine(paths, config, energy_interval_seconds=3600)
    machine.daemon.start()
    socket = machine.daemon.paths.socket
    try:
        first = ctl_json(users, "alice", machine, "allocate", "-n", "1", "--ttl", "8h")
        running = ctl_json(users, "alice", machine, "allocate", "-n", "1", "--ttl", "8h")
        machine.step(3600)
        assert users.ctl("alice", socket, "free", first["id"]).returncode == 0

        def alices_kwh() -> float:
            report = ctl_json(users, "alice", machine, "usage", "--user", users.name("alice"))
            return float(sum(u["energy_kwh"] for u in report["users"]))

        wait_for(lambda: alices_kwh() == 0.3, 30, what="the end's reading recorded")
        before = time.time()
        refused = users.ctl("alice", socket, "allocate", "-n", "1")
        assert refused.returncode != 0
        assert "0.300 kWh of 0.25 in the last 1 day(s): max_kwh_per_day" in refused.stderr
        assert "frees up at" in refused.stderr and "[quota_exceeded]" in refused.stderr
        asked = users.run("alice", ["-c", ASK, str(socket)])
        details = json.loads(asked.stdout)
        assert (details["limit"], details["current"]) == ("max_kwh_per_day", 0.3)
        assert before + 86400 - 60 < details["frees_at"] <= time.time() + 86400
        assert users.ctl("alice", socket, "renew", running["id"]).returncode == 0
        (lease,) = ctl_json(users, "alice", machine, "leases")["leases"]
        assert (lease["id"], lease["state"]) == (running["id"], "active")
        report = ctl_json(users, "alice", machine, "limits")
        by_name = {entry["limit"]: entry for entry in report["limits"]}
        assert by_name["max_kwh_per_day"]["remaining"] == 0.0
        assert 99.9 < by_name["max_gpu_hours_per_week"]["remaining"] < 100.0
        assert "remaining" not in by_name["max_kwh_per_week"]  # not set: no budget
        text = users.ctl("alice", socket, "limits").stdout
        assert "REMAINING" in text and "max_kwh_per_day" in text
        usage = ctl_json(users, "alice", machine, "usage", "--user", users.name("alice"))
        budgets = {b["limit"]: b["remaining"] for b in usage["budgets"] if b["value"]}
        assert budgets["max_kwh_per_day"] == 0.0
        text = users.ctl("alice", socket, "usage", "--user", users.name("alice")).stdout
        assert "budgets" in text and "max_gpu_hours_per_week" in text
        assert ctl_json(users, "bob", machine, "allocate", "-n", "1")["state"] == "active"
    finally:
        machine.daemon.stop()
