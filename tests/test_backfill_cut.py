"""Backfill as docs/scheduling.md says it: a defaulted TTL is cut to end at the soonest
reservation on the GPUs the lease gets (not on any GPU), also when that is under a minute
away; below the 10-second minimum the request is refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from gpulease import Client, ReservationConflict

from tests.harness import HandClock, ThreadDaemon

HOUR = 3600.0
MINUTE = 60.0


@pytest.fixture
def node(start_daemon: Callable[..., ThreadDaemon]) -> tuple[ThreadDaemon, HandClock]:
    """The 4-GPU workstation, an 8-hour default TTL; root reserves for `nobody`, so root's
    own leases are someone else's backfill."""
    clock = HandClock()
    daemon = start_daemon(default_policy="simple", clock=clock, default_ttl_seconds=8 * HOUR)
    return daemon, clock


def _reserve(client: Client, gpu: int, start_in: float) -> None:
    client.reserve(gpus=[gpu], start_in=start_in, duration=HOUR, user="nobody", reason="r")


def test_a_reservation_under_a_minute_away_cuts_a_default_ttl(
    node: tuple[ThreadDaemon, HandClock],
) -> None:
    daemon, clock = node
    with daemon.client() as client:
        _reserve(client, 0, 30.0)
        lease = client.allocate_specific([0])
    assert lease.expires_at == pytest.approx(clock.now + 30.0, abs=1.0)


def test_the_cut_follows_the_reservation_of_the_gpu_leased(
    node: tuple[ThreadDaemon, HandClock],
) -> None:
    """GPU 2 is reserved from 1 h, GPU 3 from 1 h 05 m: a lease of GPU 3 runs to 1 h 05 m."""
    daemon, clock = node
    with daemon.client() as client:
        _reserve(client, 2, HOUR)
        _reserve(client, 3, HOUR + 5 * MINUTE)
        lease = client.allocate_specific([3])
    assert lease.expires_at == pytest.approx(clock.now + HOUR + 5 * MINUTE, abs=1.0)


def test_a_count_cut_follows_its_own_gpus_reservation(
    node: tuple[ThreadDaemon, HandClock],
) -> None:
    """GPUs 0-2 leased; GPU 2 reserved from 1 h, GPU 3 from 1 h 05 m: one GPU with no TTL
    given is GPU 3, until its own reservation, not GPU 2's (5 minutes early)."""
    daemon, clock = node
    with daemon.client() as client:
        _reserve(client, 2, HOUR)
        _reserve(client, 3, HOUR + 5 * MINUTE)
        client.allocate_specific([0, 1])
        client.allocate_specific([2], ttl=30 * MINUTE)
        lease = client.allocate(1)
    assert list(lease.indices) == [3]
    assert lease.expires_at == pytest.approx(clock.now + HOUR + 5 * MINUTE, abs=1.0)


def test_a_count_gets_the_gpu_free_the_longest(node: tuple[ThreadDaemon, HandClock]) -> None:
    """Every GPU reserved, from 1, 2, 3 and 4 hours: one GPU with no TTL given is the one
    reserved last, for 4 hours."""
    daemon, clock = node
    with daemon.client() as client:
        for gpu in range(4):
            _reserve(client, gpu, (gpu + 1) * HOUR)
        lease = client.allocate(1)
    assert list(lease.indices) == [3] and lease.expires_at == pytest.approx(
        clock.now + 4 * HOUR, abs=1.0
    )


def test_below_the_minimum_the_request_is_refused(node: tuple[ThreadDaemon, HandClock]) -> None:
    daemon, _ = node
    with daemon.client() as client:
        _reserve(client, 0, 5.0)
        with pytest.raises(ReservationConflict):
            client.allocate_specific([0])
