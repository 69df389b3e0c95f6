"""Case 10: expiry runs on a monotonic clock; wall-clock steps change nothing."""

from __future__ import annotations

from collections.abc import Callable

from tests.harness import DaemonPaths, HandClock, ThreadDaemon

DAY = 24 * 3600.0


def _states(daemon: ThreadDaemon) -> list[str]:
    with daemon.client() as client:
        return [lease.state for lease in client.leases()]


def test_wall_clock_steps_neither_expire_nor_keep_leases(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """A step forward of ten days expires nothing; a step back keeps nothing past its TTL."""
    wall, boot = HandClock(1_800_000_000.0), HandClock(500.0)
    daemon = start_daemon(default_policy="simple", clock=wall, monotonic=boot)
    with daemon.client() as client:
        lease = client.allocate(1, ttl=100)
        wall.step(10 * DAY)
        assert client.lease(lease.id).state == "active"
        wall.step(-20 * DAY)
        boot.step(99)
        assert client.lease(lease.id).state == "active"
        boot.step(2)
        assert client.lease(lease.id).state == "expired"
        assert client.leases() == []


def test_a_renewal_counts_from_the_monotonic_clock(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """A lease renewed after a wall step back lasts its TTL from the renewal, no longer."""
    wall, boot = HandClock(1_800_000_000.0), HandClock(0.0)
    daemon = start_daemon(default_policy="simple", clock=wall, monotonic=boot)
    with daemon.client() as client:
        lease = client.allocate(1, ttl=100)
        wall.step(-DAY)
        boot.step(50)
        client.renew(lease.id, ttl=100)
        boot.step(99)
        assert client.lease(lease.id).state == "active"
        boot.step(2)
        assert client.lease(lease.id).state == "expired"


def test_after_a_restart_a_lease_has_what_it_had_left_by_the_wall_clock(
    paths: DaemonPaths,
) -> None:
    """Across a restart (the boot-time clock may have restarted too), a lease keeps the time
    it had left by the wall clock when the daemon starts again."""
    wall = HandClock(1_800_000_000.0)
    first = ThreadDaemon(paths, default_policy="simple", clock=wall, monotonic=HandClock(9e5))
    first.start()
    with first.client() as client:
        lease = client.allocate(1, ttl=100)
    first.stop()
    wall.step(40)
    boot = HandClock(3.0)  # a reboot: the boot-time clock starts again
    second = ThreadDaemon(paths, default_policy="simple", clock=wall, monotonic=boot).start()
    try:
        with second.client() as client:
            boot.step(59)
            assert client.lease(lease.id).state == "active"
            boot.step(2)
            assert client.lease(lease.id).state == "expired"
    finally:
        second.stop()
