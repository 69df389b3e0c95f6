"""`with gpu_lease(n):` as a training script uses it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest
from gpulease import GpusUnavailable, LeaseRevoked, gpu_lease

from tests.harness import ThreadDaemon, wait_for


def test_context_sets_cuda_visible_devices_and_frees(daemon: ThreadDaemon) -> None:
    """Inside the block CUDA_VISIBLE_DEVICES names the leased UUIDs; after it, all is back."""
    os.environ["CUDA_VISIBLE_DEVICES"] = "previous"
    with gpu_lease(2, socket=daemon.paths.socket) as lease:
        assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(g.uuid for g in lease.gpus)
        assert os.environ["GPUALLOCD_LEASE_ID"] == lease.id
        with daemon.client() as client:
            assert [x.id for x in client.leases()] == [lease.id]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "previous"
    assert "GPUALLOCD_LEASE_ID" not in os.environ
    with daemon.client() as client:
        assert client.leases() == []


def test_the_block_lends_its_connection_for_calls_about_the_lease(daemon: ThreadDaemon) -> None:
    """`cm.client` is the lease's own connection while the block runs, None outside it."""
    cm = gpu_lease(1, socket=daemon.paths.socket)
    assert cm.client is None
    with cm as lease:
        assert cm.client is not None
        assert cm.client.lease(lease.id).state == "active"
    assert cm.client is None


def test_index_mode_sets_pci_bus_order(daemon: ThreadDaemon) -> None:
    """visible='index' gives indices and CUDA_DEVICE_ORDER=PCI_BUS_ID."""
    with gpu_lease(2, socket=daemon.paths.socket, visible="index") as lease:
        assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(str(g.index) for g in lease.gpus)
        assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "CUDA_DEVICE_ORDER" not in os.environ


def test_lease_is_freed_when_the_body_raises(daemon: ThreadDaemon) -> None:
    """An exception in the body still frees the lease and restores the environment."""
    with pytest.raises(RuntimeError), gpu_lease(1, socket=daemon.paths.socket):
        raise RuntimeError("training crashed")
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    with daemon.client() as client:
        assert client.leases() == []


def test_decorator_takes_a_lease_per_call(daemon: ThreadDaemon) -> None:
    """As a decorator, each call leases and frees on its own."""
    seen: list[str] = []

    @gpu_lease(1, socket=daemon.paths.socket)
    def train() -> None:
        seen.append(os.environ["GPUALLOCD_LEASE_ID"])

    train()
    train()
    assert len(seen) == 2 and seen[0] != seen[1]
    with daemon.client() as client:
        assert client.leases() == []


def test_specific_gpus(daemon: ThreadDaemon) -> None:
    """gpus= leases exactly those GPUs."""
    with gpu_lease(gpus=[3, 1], socket=daemon.paths.socket) as lease:
        assert sorted(g.index for g in lease.gpus) == [1, 3]


def test_no_free_gpus_raises_without_wait(daemon: ThreadDaemon) -> None:
    """Without wait, a full node raises GpusUnavailable at once."""
    with (
        gpu_lease(4, socket=daemon.paths.socket),
        pytest.raises(GpusUnavailable),
        gpu_lease(1, socket=daemon.paths.socket, nested="new"),  # not the lease around it
    ):
        pass


def test_background_thread_renews_the_lease(daemon: ThreadDaemon) -> None:
    """With a 1.5 s TTL the lease outlives several TTLs because it is renewed."""
    with gpu_lease(1, ttl=1.5, socket=daemon.paths.socket) as lease:
        time.sleep(4)
        with daemon.client() as client:
            assert client.lease(lease.id).state == "active"
            events = [e["event"] for e in client.history(lease.id)]
    assert events.count("renewed") >= 3


def test_revocation_is_reported_to_a_callback(daemon: ThreadDaemon) -> None:
    """on_revoke=callable is called from the renew thread once the lease is revoked."""
    if os.getuid() != 0:
        pytest.fail("revoke needs root in this version; run the suite as root")
    lost: list[str] = []
    with gpu_lease(
        1, ttl=0.9, socket=daemon.paths.socket, on_revoke=lambda lease, exc: lost.append(lease.id)
    ) as lease:
        with daemon.client() as client:
            client.revoke(lease.id)
        wait_for(lambda: bool(lost), 5)
    assert lost == [lease.id]


def test_after_the_block_the_lease_says_how_it_had_ended(daemon: ThreadDaemon) -> None:
    """`end_state` is None where the block's free ended the lease, and the state the free
    found where something else had ended it first (a revoke): no request asks for it."""
    freed = gpu_lease(1, socket=daemon.paths.socket, on_revoke=lambda lease, exc: None)
    with freed:
        pass
    assert freed.end_state is None
    revoked = gpu_lease(1, socket=daemon.paths.socket, on_revoke=lambda lease, exc: None)
    with revoked as lease, daemon.client() as client:
        client.revoke(lease.id, reason="maintenance")
    assert revoked.end_state == "revoked"


def test_revocation_raises_in_the_main_thread(daemon: ThreadDaemon) -> None:
    """on_revoke='raise' interrupts the body with LeaseRevoked."""
    with (
        pytest.raises(LeaseRevoked),
        gpu_lease(1, ttl=0.9, socket=daemon.paths.socket, on_revoke="raise") as lease,
    ):
        with daemon.client() as client:
            client.revoke(lease.id)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.01)


def test_waiting_lease_gets_gpus_when_freed(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """wait=True blocks until another lease frees GPUs, then proceeds."""
    import threading

    daemon = start_daemon(default_policy="simple")
    with daemon.client() as client:
        holder = client.allocate(4)

    def free_holder() -> None:
        with daemon.client() as other:
            other.free(holder.id)

    threading.Timer(0.5, free_holder).start()
    started = time.monotonic()
    with gpu_lease(2, wait=True, timeout=10, socket=daemon.paths.socket) as lease:
        assert len(lease.gpus) == 2
    assert time.monotonic() - started >= 0.4
