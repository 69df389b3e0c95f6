"""Accounting from the history, and the purge of history past its retention."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from gpulease import UnknownLease

from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.rules_harness import SteppedClock, daemon_with_config
from tests.system_users import SystemUsers, open_to_everyone

HOUR = 3600.0
DAY = 86400.0


def usage_from_history(daemon: ThreadDaemon, now: float) -> dict[str, tuple[float, int]]:
    """GPU-hours and leases per user, recomputed from the raw history events."""
    with daemon.client() as client:
        events = client.history(limit=10_000)
        found: dict[str, tuple[float, int]] = {}
        for lease_id in dict.fromkeys(e["lease_id"] for e in events):
            lease = client.lease(lease_id)
            mine = [e for e in events if e["lease_id"] == lease_id]
            start = next(e["at"] for e in mine if e["event"] == "granted")
            ends = [e["at"] for e in mine if e["event"] in ("freed", "expired", "revoked")]
            held = (ends[0] if ends else now) - start
            hours, count = found.get(lease.user, (0.0, 0))
            found[lease.user] = (hours + held * len(lease.gpus) / HOUR, count + 1)
    return found


def test_usage_per_user_matches_the_history(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """alice holds 4 GPUs for an hour while bob waits; bob then holds 1 GPU for 2 hours.
    `usage` gives 4 and 2 GPU-hours, one lease each, bob's hour of waiting: the history's
    numbers."""
    users = system_users
    open_to_everyone(short_dir)
    clock = SteppedClock()
    daemon = daemon_with_config(paths, 'default_policy = "simple"\n', clock=clock).start()
    socket = daemon.paths.socket
    try:
        done = users.ctl("alice", socket, "--json", "allocate", "-n", "4", "--ttl", "36000")
        alice = json.loads(done.stdout)
        argv = ["-m", "gpuallocd.cli", "--socket", str(socket), "allocate", "-n", "1", "--wait"]
        waiter = users.start("bob", [*argv, "--ttl", "36000"], short_dir / "bob.log")
        with daemon.client() as root:
            wait_for(lambda: len(root.queue()) == 1, 30)
            clock.advance(HOUR)
            assert users.ctl("alice", socket, "free", alice["id"]).returncode == 0
            assert waiter.wait(30) == 0
            clock.advance(2 * HOUR)
        report = json.loads(users.ctl("carol", socket, "usage", "--since", "1d", "--json").stdout)
        by_user = {u["user"]: u for u in report["users"]}
        history = usage_from_history(daemon, report["until"])
        for who in ("alice", "bob"):
            name = users.name(who)
            assert by_user[name]["gpu_hours"] == pytest.approx(history[name][0], abs=1e-6)
            assert by_user[name]["leases"] == history[name][1] == 1
        assert by_user[users.name("alice")]["gpu_hours"] == pytest.approx(4.0, abs=0.01)
        assert by_user[users.name("bob")]["gpu_hours"] == pytest.approx(2.0, abs=0.01)
        assert by_user[users.name("bob")]["waiting_seconds"] == pytest.approx(HOUR, abs=5)
        only_bob = users.ctl("carol", socket, "--json", "usage", "--user", users.name("bob"))
        assert [u["user"] for u in json.loads(only_bob.stdout)["users"]] == [users.name("bob")]
    finally:
        daemon.stop()


def test_history_past_its_retention_is_purged_and_the_rest_kept(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """Restarted 31 days later with a 30-day retention, the daemon purges the leases that
    ended before, with their history; the lease ended yesterday and the active one stay."""
    clock = SteppedClock()
    first = start_daemon(
        default_policy="simple", clock=clock, history_retention_days=30.0, max_ttl_seconds=90 * DAY
    )
    with first.client() as client:
        old = [client.allocate(1, ttl=90 * DAY) for _ in range(3)]
        for lease in old:
            client.free(lease.id)
        client.drain([3], "old news")
        kept = client.allocate(1, ttl=90 * DAY)
        clock.advance(30 * DAY)
        recent = client.allocate(1, ttl=90 * DAY)
        client.free(recent.id)
    first.stop()
    clock.advance(DAY)
    second = start_daemon(
        default_policy="simple", clock=clock, history_retention_days=30.0, max_ttl_seconds=90 * DAY
    )
    with second.client() as client:

        def purged() -> bool:
            try:
                client.lease(old[-1].id)
            except UnknownLease:
                return True
            return False

        wait_for(purged, 30)
        for lease in old:
            with pytest.raises(UnknownLease):
                client.lease(lease.id)
            with pytest.raises(UnknownLease):  # its history went with it
                client.history(lease.id)
        assert client.lease(kept.id).state == "active"
        assert client.lease(recent.id).state == "freed"
        assert client.admin_actions() == []  # the drain record is older than 30 days
        assert client.status()[3].state == "drained"  # the drain itself stands
