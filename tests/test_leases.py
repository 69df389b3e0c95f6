"""Leasing end to end: a real daemon, a real socket, the real client."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest
from gpulease import Client, GpuBusy, GpusUnavailable, LeaseNotActive, PermissionDenied

from tests.harness import HandClock, ThreadDaemon, ctl_argv


def test_allocate_returns_lowest_free_gpus_with_uuids(daemon: ThreadDaemon) -> None:
    """`simple` grants the lowest free indices, each with its UUID."""
    with daemon.client() as client:
        lease = client.allocate(2, label="train")
        assert [g.index for g in lease.gpus] == [0, 1]
        assert all(g.uuid.startswith("GPU-") for g in lease.gpus)
        assert lease.state == "active" and lease.label == "train"


def test_lease_records_caller_identity_from_the_kernel(daemon: ThreadDaemon) -> None:
    """Owner uid and pid come from SO_PEERCRED, not from the request."""
    import os

    with daemon.client() as client:
        lease = client.allocate(1)
    assert lease.owner_uid == os.getuid()
    assert lease.pid == os.getpid()


def test_status_shows_holder_and_state(daemon: ThreadDaemon) -> None:
    """status lists every GPU, leased ones with their lease."""
    with daemon.client() as client:
        lease = client.allocate(1)
        gpus = client.status()
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert [g.state for g in gpus] == ["leased", "free", "free", "free"]
    assert gpus[0].lease_id == lease.id


def test_free_makes_gpus_available_again(daemon: ThreadDaemon) -> None:
    """A freed lease's GPUs can be leased again; the lease reads as freed."""
    with daemon.client() as client:
        first = client.allocate(4)
        with pytest.raises(GpusUnavailable):
            client.allocate(1)
        freed = client.free(first.id)
        assert freed.state == "freed"
        assert client.lease(first.id).state == "freed"
        assert len(client.allocate(4).gpus) == 4


def test_allocate_specific_by_index_and_uuid(daemon: ThreadDaemon) -> None:
    """GPUs can be named by index or UUID; a leased one is refused as gpu_busy."""
    with daemon.client() as client:
        uuid3 = client.status()[3].uuid
        lease = client.allocate_specific([2, uuid3])
        assert lease.indices == (2, 3)
        with pytest.raises(GpuBusy):
            client.allocate_specific([3])


def test_required_gpus_plus_count_takes_the_rest_by_policy(daemon: ThreadDaemon) -> None:
    """count larger than the named GPUs: the policy picks the others."""
    with daemon.client() as client:
        lease = client.allocate(3, gpus=[3])
    assert set(lease.indices) == {0, 1, 3}


def test_free_twice_is_lease_not_active(daemon: ThreadDaemon) -> None:
    """Freeing an ended lease says so and changes nothing."""
    with daemon.client() as client:
        lease = client.allocate(1)
        client.free(lease.id)
        with pytest.raises(LeaseNotActive):
            client.free(lease.id)


def test_renew_extends_expiry(start_daemon: Callable[..., ThreadDaemon]) -> None:
    """renew moves the expiry to now + ttl."""
    clock = HandClock()
    daemon = start_daemon(default_policy="simple", clock=clock)
    with daemon.client() as client:
        lease = client.allocate(1, ttl=100)
        assert lease.expires_at == pytest.approx(clock.now + 100)
        clock.step(60)
        renewed = client.renew(lease.id, ttl=100)
    assert renewed.expires_at == pytest.approx(clock.now + 100)


def test_expired_lease_is_reclaimed(start_daemon: Callable[..., ThreadDaemon]) -> None:
    """A lease not renewed within its TTL ends as expired and frees its GPUs."""
    clock = HandClock()
    daemon = start_daemon(default_policy="simple", clock=clock)
    with daemon.client() as client:
        lease = client.allocate(4, ttl=30)
        clock.step(31)
        assert client.leases() == []
        assert client.lease(lease.id).state == "expired"
        with pytest.raises(LeaseNotActive):
            client.renew(lease.id)
        assert len(client.allocate(4).gpus) == 4
        events = [e["event"] for e in client.history(lease.id)]
    assert events == ["granted", "expired"]


def test_revoke_by_root_ends_the_lease(daemon: ThreadDaemon) -> None:
    """root revokes any lease; the history records who and why."""
    import os

    with daemon.client() as client:
        lease = client.allocate(2)
        if os.getuid() != 0:
            with pytest.raises(PermissionDenied):
                client.revoke(lease.id)
            return
        revoked = client.revoke(lease.id, reason="maintenance")
        assert revoked.state == "revoked"
        last = client.history(lease.id)[-1]
    assert last["event"] == "revoked" and last["detail"] == "maintenance"
    assert last["actor_uid"] == 0


def test_leases_survive_a_restart(paths, start_daemon: Callable[..., ThreadDaemon]) -> None:  # type: ignore[no-untyped-def]
    """The ledger is durable: a restarted daemon knows every active lease."""
    first = start_daemon(default_policy="simple")
    with first.client() as client:
        lease = client.allocate(2, label="keep")
    first.stop()
    second = ThreadDaemon(paths, default_policy="simple").start()
    try:
        with second.client() as client:
            assert [x.id for x in client.leases()] == [lease.id]
            with pytest.raises(GpuBusy):
                client.allocate_specific([0])
    finally:
        second.stop()


def test_a_run_writes_no_renewal_at_its_start(daemon: ThreadDaemon) -> None:
    """`gpuallocctl run` renews as its command starts (the daemon then looks for the
    command's processes): the history says granted and freed, no renewal in the grant's
    second."""
    done = subprocess.run(
        ctl_argv(daemon.paths.socket, "--json", "run", "-n", "1", "--", "true"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    with daemon.client() as client:
        events = client.history()
    assert [e["event"] for e in events] == ["granted", "freed"]


def test_a_renewal_that_moves_the_end_is_recorded_and_one_that_does_not_is_not(
    daemon: ThreadDaemon,
) -> None:
    """Renewing with the grant's TTL at once moves nothing and writes nothing; a renewal
    with another TTL moves the end and is in the history."""
    with daemon.client() as client:
        lease = client.allocate(1, ttl=600)
        same = client.renew(lease.id, ttl=600)
        moved = client.renew(lease.id, ttl=1200)
        events = [e["event"] for e in client.history(lease.id)]
    assert same.expires_at == lease.expires_at
    assert moved.expires_at >= lease.expires_at + 599
    assert events == ["granted", "renewed"]


def test_history_records_every_transition(daemon: ThreadDaemon) -> None:
    """granted, renewed, freed: each transition is in the history with the actor."""
    import os

    with daemon.client() as client:
        lease = client.allocate(1)
        client.renew(lease.id, ttl=7200)
        client.free(lease.id)
        events = client.history(lease.id)
    assert [e["event"] for e in events] == ["granted", "renewed", "freed"]
    assert {e["actor_uid"] for e in events} == {os.getuid()}


def test_client_reads_socket_from_environment(daemon: ThreadDaemon) -> None:
    """Client() without a socket argument uses $GPUALLOCD_SOCKET."""
    import os

    os.environ["GPUALLOCD_SOCKET"] = str(daemon.paths.socket)
    with Client() as client:
        assert client.socket_path == str(daemon.paths.socket)
        assert len(client.status()) == 4
