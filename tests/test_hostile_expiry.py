"""An expiry is charged at its due time however late the daemon notices it: a lease whose TTL
ran out while the daemon was down, or while nothing asked, costs its owner only its TTL."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonPaths, ThreadDaemon
from tests.rules_harness import SteppedClock, daemon_with_config
from tests.system_users import SystemUsers, open_to_everyone

HOUR = 3600.0
RULES = 'default_policy = "simple"\n[limits]\nmax_gpu_hours_per_day = 1\n'


def ctl_json(users: SystemUsers, who: str, socket: Path, *args: str) -> Any:
    done = users.ctl(who, socket, "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def alice_gpu_seconds(users: SystemUsers, socket: Path) -> float:
    report = ctl_json(users, "carol", socket, "usage", "--user", users.name("alice"))
    return float(report["users"][0]["gpu_hours"]) * HOUR


def test_a_lease_that_expired_while_the_daemon_was_down_is_charged_its_ttl(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """alice's 10 s lease expires during a 2-hour stop: `usage` charges 10 GPU-seconds, its
    end is its expiry, and her 1 GPU-hour a day is not used up."""
    users = system_users
    open_to_everyone(short_dir)
    clock = SteppedClock()
    start: Callable[[], ThreadDaemon] = lambda: daemon_with_config(  # noqa: E731
        paths, RULES, clock=clock
    ).start()
    first = start()
    socket = first.paths.socket
    lease = ctl_json(users, "alice", socket, "allocate", "-n", "1", "--ttl", "10")
    first.stop()
    clock.advance(2 * HOUR)
    second = start()
    try:
        with second.client() as root:
            shown = root.lease(lease["id"]).raw
        assert shown["state"] == "expired"
        assert shown["ended_at"] == pytest.approx(lease["expires_at"], abs=0.5)
        assert alice_gpu_seconds(users, socket) == pytest.approx(10.0, abs=1.0)
        again = users.ctl("alice", socket, "allocate", "-n", "1", "--ttl", "60")
        assert again.returncode == 0, again.stderr
    finally:
        second.stop()


def test_an_expiry_noticed_late_is_charged_at_its_due_time(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """The clock moves 2 hours past a 10 s lease before anything asks: the lease ended at its
    expiry, 10 GPU-seconds charged."""
    users = system_users
    open_to_everyone(short_dir)
    clock = SteppedClock()
    daemon = daemon_with_config(paths, RULES, clock=clock).start()
    socket = daemon.paths.socket
    try:
        lease = ctl_json(users, "alice", socket, "allocate", "-n", "1", "--ttl", "10")
        clock.advance(2 * HOUR)
        with daemon.client() as root:
            shown = root.lease(lease["id"]).raw
        assert shown["state"] == "expired"
        assert shown["ended_at"] == pytest.approx(lease["expires_at"], abs=0.5)
        assert alice_gpu_seconds(users, socket) < 11.0
    finally:
        daemon.stop()
