"""The daemon's feed of notices: each fact once, at the owner's thresholds on the monotonic
clock, with the lease's own event stream told of each warning, across restarts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from gpulease import Client, InvalidRequest

from gpuallocd.inventory.nvml.backend import NvmlInventory
from tests.harness import DaemonPaths, HandClock, ThreadDaemon, wait_for
from tests.rules_harness import daemon_with_config
from tests.test_idle_reclaim import IdleNode, start_idle_node

START = 1_800_000_000.0
MINUTE = 60.0


class Clocks:
    def __init__(self) -> None:
        self.wall, self.boot = HandClock(START), HandClock(5000.0)

    def step(self, seconds: float) -> None:
        self.wall.step(seconds)
        self.boot.step(seconds)

    def daemon(self, paths: DaemonPaths, **settings: Any) -> ThreadDaemon:
        settings.setdefault("default_policy", "simple")
        return ThreadDaemon(paths, clock=self.wall, monotonic=self.boot, **settings).start()


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


@pytest.fixture
def clocked(paths: DaemonPaths, clocks: Clocks) -> Any:
    daemon = clocks.daemon(paths)
    yield daemon
    daemon.stop()


def titles(client: Client, kind: str | None = None) -> list[str]:
    notices = client.notifications(limit=500)["notices"]
    return [n["title"] for n in notices if kind is None or n["kind"] == kind]


def until_told(client: Client, count: int, kind: str = "ending") -> list[str]:
    """The titles of `kind` once there are `count` of them (the timer ticks every 0.5 s)."""
    wait_for(lambda: len(titles(client, kind)) >= count, 20, what=f"{count} {kind} notice(s)")
    return titles(client, kind)


def test_a_lease_is_warned_at_each_threshold_once_and_its_stream_hears_it(
    clocked: ThreadDaemon, clocks: Clocks
) -> None:
    """15 minutes and 1 minute before a one-hour lease expires: one notice each, whatever
    the ticks after; each also an `ending` event in the lease's history (what `run` prints)."""
    with clocked.client() as client:
        lease = client.allocate(1, ttl=3600, label="resnet")
        clocks.step(45 * MINUTE)
        assert until_told(client, 1) == [f"lease {lease.id} (resnet) expires in 15m"]
        clocks.step(14 * MINUTE)
        told = until_told(client, 2)
        assert told[1] == f"lease {lease.id} (resnet) expires in 1m"
        clocks.step(30)
        client.notifications(after=0, wait=1)
        assert len(titles(client, "ending")) == 2
        events = [e["event"] for e in client.history(lease.id)]
        assert events.count("ending") == 2


def test_a_lease_granted_for_less_than_a_threshold_is_not_warned_at_it(
    clocked: ThreadDaemon, clocks: Clocks
) -> None:
    """A ten-minute lease is not told "15 minutes left" at its grant; it is at 1 minute."""
    with clocked.client() as client:
        lease = client.allocate(1, ttl=600)
        clocks.step(9 * MINUTE + 1)
        assert until_told(client, 1) == [f"lease {lease.id} expires in 1m"]


def test_a_renewal_moves_the_warnings_to_the_new_end(clocked: ThreadDaemon, clocks: Clocks) -> None:
    """Renewed after its 15-minute warning, a lease is warned again before its new end."""
    with clocked.client() as client:
        lease = client.allocate(1, ttl=3600)
        clocks.step(46 * MINUTE)
        until_told(client, 1)
        client.renew(lease.id, ttl=3600)
        clocks.step(30 * MINUTE)
        client.notifications(after=0, wait=1)
        assert len(titles(client, "ending")) == 1  # the old 1-minute mark is gone
        clocks.step(16 * MINUTE)
        assert len(until_told(client, 2)) == 2


def test_a_restart_between_two_thresholds_neither_repeats_nor_loses_one(
    paths: DaemonPaths, clocks: Clocks
) -> None:
    """Warned at 15 minutes, the daemon restarts: the 15-minute warning is not told again,
    the 1-minute one is told once."""
    first = clocks.daemon(paths)
    with first.client() as client:
        lease = client.allocate(1, ttl=3600)
        clocks.step(46 * MINUTE)
        until_told(client, 1)
    first.stop()
    second = clocks.daemon(paths)
    try:
        with second.client() as client:
            clocks.step(MINUTE)
            client.notifications(after=0, wait=1)
            assert len(titles(client, "ending")) == 1
            clocks.step(12 * MINUTE + 1)
            told = until_told(client, 2)
            assert told == [
                f"lease {lease.id} expires in 14m",
                f"lease {lease.id} expires in 1m",
            ]
            clocks.step(20)
            client.notifications(after=0, wait=1)
            assert len(titles(client, "ending")) == 2
    finally:
        second.stop()


def test_a_threshold_passed_while_the_daemon_was_down_is_told_late_once(
    paths: DaemonPaths, clocks: Clocks
) -> None:
    """Down across the 15-minute mark: told at start, with the time it really has left."""
    first = clocks.daemon(paths)
    with first.client() as client:
        lease = client.allocate(1, ttl=3600)
    first.stop()
    clocks.step(50 * MINUTE)
    second = clocks.daemon(paths)
    try:
        with second.client() as client:
            assert until_told(client, 1) == [f"lease {lease.id} expires in 10m"]
    finally:
        second.stop()


def test_each_user_sets_their_own_thresholds_and_bad_ones_change_nothing(
    clocked: ThreadDaemon, clocks: Clocks
) -> None:
    """`notify thresholds 30m 5m`: warned then; out-of-range thresholds are refused."""
    with clocked.client() as client:
        assert client.notify_settings()["thresholds_seconds"] == [900.0, 60.0]
        client.set_notify_thresholds([300, 1800])
        for bad in ([1], [0], [60] * 6, [8 * 86400]):
            with pytest.raises(InvalidRequest):
                client.set_notify_thresholds(bad)
        assert client.notify_settings()["thresholds_seconds"] == [1800.0, 300.0]
        lease = client.allocate(1, ttl=3600)
        clocks.step(31 * MINUTE)
        assert until_told(client, 1) == [f"lease {lease.id} expires in 29m"]


def test_an_owners_free_tells_nothing_and_an_expiry_and_a_revoke_tell_the_owner(
    clocked: ThreadDaemon, clocks: Clocks
) -> None:
    """Freeing one's own lease is no news; its expiry is; an admin's revoke is, with why."""
    with clocked.client() as client:
        client.free(client.allocate(1, ttl=600).id)
        expiring = client.allocate(1, ttl=30)
        revoked = client.allocate(1, ttl=3600)
        client.revoke(revoked.id, reason="maintenance")
        clocks.step(31)
        until_told(client, 1, kind="ended")
        notices = client.notifications()["notices"]
        by_kind = {n["kind"]: n for n in notices}
        assert by_kind["ended"]["title"] == f"lease {expiring.id} expired"
        assert by_kind["revoked"]["body"].endswith(": maintenance")
        assert len(notices) == 2


def test_a_reservation_that_will_end_a_lease_is_warned(
    clocked: ThreadDaemon, clocks: Clocks, system_users: Any
) -> None:
    """A lease on a GPU that an advance reservation for someone else takes in 20 minutes:
    its owner is told 15 minutes before, naming the reservation."""
    with clocked.client() as client:
        lease = client.allocate(gpus=[0], ttl=7200)
        made = client.reserve(
            gpus=[0],
            start_in=20 * MINUTE,
            duration=3600,
            user=system_users.name("alice"),
            reason="demo",
        )
        clocks.step(5 * MINUTE + 1)
        told = until_told(client, 1)
        assert told == [f"lease {lease.id} ends for a reservation in 15m"]
        body = client.notifications()["notices"][0]["body"]
        assert f"reservation {made['id']} for" in body


def test_an_idle_lease_is_warned_before_it_may_be_reclaimed(paths: DaemonPaths) -> None:
    """Idle since its grant, with 30 minutes to reclaim and 10 of grace: told 15 minutes
    before it becomes reclaimable."""
    node, inventory = start_idle_node(paths, idle_reclaim_minutes=30.0, idle_grace_minutes=10.0)
    try:
        with node.daemon.client() as client:
            lease = client.allocate(1, ttl=7200)
            node.sampled()
            node.clock.advance(26 * MINUTE)
            node.sampled()
            told = until_told(client, 1)
            assert told[0].startswith(f"lease {lease.id} may be reclaimed (idle) in 1")
    finally:
        node.daemon.stop()
        inventory.close()


IDLE_RULES = {"idle_reclaim_minutes": 30.0, "idle_grace_minutes": 10.0}


def restart_idle(node: IdleNode, inventory: NvmlInventory) -> tuple[IdleNode, NvmlInventory]:
    """Stop the daemon and start another on the same ledger and clock (a fresh fake GPU:
    idle, as the recording is)."""
    node.daemon.stop()
    inventory.close()
    return start_idle_node(node.daemon.paths, clock=node.clock, **IDLE_RULES)


def idle_warnings(client: Client) -> list[str]:
    return [t for t in titles(client, "ending") if "may be reclaimed (idle)" in t]


def test_an_idle_warning_is_told_once_per_threshold_across_a_restart(paths: DaemonPaths) -> None:
    """Warned 15 minutes before idle reclaim, the daemon restarts (the idle time starts
    again, the spell goes on): the 15-minute warning is not told again, the 1-minute one is
    told once, before the new deadline."""
    node, inventory = start_idle_node(paths, **IDLE_RULES)
    try:
        with node.daemon.client() as client:
            lease = client.allocate(1, ttl=7200)
            node.sampled()
            node.clock.advance(26 * MINUTE)
            node.sampled()
            wait_for(lambda: len(idle_warnings(client)) == 1, 20, what="the 15-minute warning")
        node, inventory = restart_idle(node, inventory)
        with node.daemon.client() as client:
            node.sampled()
            node.clock.advance(26 * MINUTE)  # past the 15-minute mark of the new deadline
            node.sampled()
            client.notifications(after=0, wait=1)
            assert len(idle_warnings(client)) == 1
            node.clock.advance(13 * MINUTE + 1)
            node.sampled()
            wait_for(lambda: len(idle_warnings(client)) == 2, 20, what="the 1-minute warning")
            assert idle_warnings(client)[1].startswith(f"lease {lease.id} may be reclaimed (idle)")
            told = client.notifications()["notices"]
            assert [n["data"]["threshold_seconds"] for n in told] == [900.0, 60.0]
            node.clock.advance(30)
            node.sampled()
            client.notifications(after=0, wait=1)
            assert len(idle_warnings(client)) == 2
    finally:
        node.daemon.stop()
        inventory.close()


def test_a_lease_idle_again_after_use_is_warned_again_across_a_restart(
    paths: DaemonPaths,
) -> None:
    """Idle, warned, then used (a sample shows load), the daemon restarts, idle again: a
    new spell, warned again at 15 minutes (it was never told, once per lease)."""
    node, inventory = start_idle_node(paths, **IDLE_RULES)
    try:
        with node.daemon.client() as client:
            lease = client.allocate(1, ttl=7200)
            node.sampled()
            node.clock.advance(26 * MINUTE)
            node.sampled()
            wait_for(lambda: len(idle_warnings(client)) == 1, 20, what="the first spell's warning")
            node.fake.set_utilization(lease.gpus[0].uuid, 80)
            node.sampled()
        node, inventory = restart_idle(node, inventory)
        with node.daemon.client() as client:
            node.sampled()
            node.clock.advance(26 * MINUTE)
            node.sampled()
            wait_for(lambda: len(idle_warnings(client)) == 2, 20, what="the second spell's warning")
            assert idle_warnings(client)[1].startswith(f"lease {lease.id} may be reclaimed (idle)")
    finally:
        node.daemon.stop()
        inventory.close()


def test_a_budget_at_80_percent_and_at_100_percent_is_told_once_each(
    paths: DaemonPaths,
) -> None:
    """A 1 GPU-hour weekly budget: told at 80 % and at 100 % as the lease runs, once each."""
    clock = HandClock(START)
    daemon = daemon_with_config(
        paths, "[limits]\nmax_gpu_hours_per_week = 1.0\n", clock=clock, default_policy="simple"
    ).start()
    try:
        with daemon.client() as client:
            client.allocate(1, ttl=7200)
            clock.step(49 * MINUTE)
            until_told(client, 1, kind="budget")
            clock.step(12 * MINUTE)
            told = until_told(client, 2, kind="budget")
            assert told == [
                "budget max_gpu_hours_per_week at 80 %",
                "budget max_gpu_hours_per_week reached",
            ]
    finally:
        daemon.stop()


def test_the_feed_is_woken_at_once_and_read_by_number(
    clocked: ThreadDaemon, clocks: Clocks, start_daemon: Callable[..., ThreadDaemon]
) -> None:
    """A long poll answers at the next notice; `after` reads past what was seen."""
    with clocked.client() as client:
        client.allocate(1, ttl=30)
        clocks.step(31)
        answer = client.notifications(after=0, wait=20)
        assert [n["kind"] for n in answer["notices"]] == ["ended"]
        assert client.notifications(after=answer["next"])["notices"] == []
