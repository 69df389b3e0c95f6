"""Waiting for GPUs: first come, first served, no starvation, no lingering waiters."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from gpulease import Client, GpusUnavailable, Lease

from tests.harness import ThreadDaemon, wait_for


class Waiter(threading.Thread):
    """A client blocked in allocate(wait=True) on a thread of its own."""

    def __init__(self, daemon: ThreadDaemon, **request: Any) -> None:
        super().__init__(daemon=True)
        self._daemon, self._request = daemon, request
        self.lease: Lease | None = None
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with self._daemon.client() as client:
                self.lease = client.allocate(wait=True, **self._request)
        except Exception as exc:
            self.error = exc


def queue_length(client: Client) -> int:
    return len(client.queue())


def enqueue(daemon: ThreadDaemon, client: Client, **request: Any) -> Waiter:
    before = queue_length(client)
    waiter = Waiter(daemon, **request)
    waiter.start()
    wait_for(lambda: queue_length(client) == before + 1, 10)
    return waiter


def test_waiters_are_served_first_come_first_served(daemon: ThreadDaemon) -> None:
    """Two waiters for 2 GPUs each: when 2 GPUs come free, the first gets them."""
    with daemon.client() as client:
        holder = client.allocate(4)
        first = enqueue(daemon, client, count=2)
        second = enqueue(daemon, client, count=2)
        assert [w["position"] for w in client.queue()] == [1, 2]
        client.free(holder.id)
        first.join(10)
        second.join(10)
    assert first.lease is not None and second.lease is not None
    assert first.lease.created_at <= second.lease.created_at


def test_small_request_does_not_jump_a_blocked_large_one(daemon: ThreadDaemon) -> None:
    """A free GPU that the waiting 4-GPU request needs is not given to a later 1-GPU request."""
    with daemon.client() as client:
        holder = client.allocate(3)
        large = enqueue(daemon, client, count=4)
        with pytest.raises(GpusUnavailable):
            client.allocate(1)  # GPU 3 is free, but reserved for the head of the queue
        small = enqueue(daemon, client, count=1)
        client.free(holder.id)
        large.join(10)
        assert large.lease is not None and len(large.lease.gpus) == 4
        assert small.lease is None and queue_length(client) == 1
        client.free(large.lease.id)
        small.join(10)
    assert small.lease is not None


def test_small_request_may_use_gpus_the_head_can_never_use(daemon: ThreadDaemon) -> None:
    """When the head waits for named GPUs, others may take GPUs it did not name."""
    with daemon.client() as client:
        holder = client.allocate_specific([0, 1])
        head = enqueue(daemon, client, gpus=[0, 1])
        lease = client.allocate(1)  # GPU 2 or 3: the head could never use them
        assert set(lease.indices) <= {2, 3}
        client.free(holder.id)
        head.join(10)
    assert head.lease is not None and head.lease.indices == (0, 1)


def test_wait_timeout_ends_with_gpus_unavailable(daemon: ThreadDaemon) -> None:
    """A waiter whose timeout passes gets gpus_unavailable and leaves the queue."""
    with daemon.client() as client:
        client.allocate(4)
        started = time.monotonic()
        with pytest.raises(GpusUnavailable, match="within"):
            client.allocate(1, wait=True, timeout=0.5)
        assert 0.4 < time.monotonic() - started < 5
        assert queue_length(client) == 0


def test_disconnected_waiter_leaves_the_queue_at_once(daemon: ThreadDaemon) -> None:
    """A client that hangs up while waiting is out of the queue and never gets a lease."""
    body = b'{"count": 1, "wait": true}'
    request = (
        b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    with daemon.client() as client:
        holder = client.allocate(4)
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.connect(str(daemon.paths.socket))
        raw.sendall(request)
        wait_for(lambda: queue_length(client) == 1, 10)
        raw.close()
        wait_for(lambda: queue_length(client) == 0, 2.0)
        client.free(holder.id)
        time.sleep(0.3)
        assert client.leases() == []


def test_queue_shows_who_waits_for_what(daemon: ThreadDaemon) -> None:
    """`queue` lists each waiter with owner, pid, count, GPUs and label."""
    import os

    with daemon.client() as client:
        holder = client.allocate(4)
        waiter = enqueue(daemon, client, count=2, label="sweep-7")
        (entry,) = client.queue()
        assert entry["count"] == 2 and entry["label"] == "sweep-7"
        assert entry["owner"]["uid"] == os.getuid() and entry["pid"] == os.getpid()
        client.free(holder.id)
        waiter.join(10)
    assert waiter.lease is not None


def test_many_waiters_all_served_without_double_booking(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """Twelve waiters on a full 8-GPU node are all served as leases end, never sharing a GPU."""
    daemon = start_daemon(default_policy="simple", inventory="example:dgx1-volta")
    with daemon.client() as client:
        holders = [client.allocate(2) for _ in range(4)]
        waiters = [enqueue(daemon, client, count=1 + i % 2) for i in range(12)]
        for holder in holders:
            client.free(holder.id)
        served: list[Lease] = []
        while len(served) < 12:
            wait_for(lambda: any(w.lease and w.lease not in served for w in waiters), 10)
            active = [w.lease for w in waiters if w.lease and w.lease not in served]
            held = [u for lease in client.leases() for u in lease.uuids]
            assert len(held) == len(set(held))
            for lease in active:
                served.append(lease)
                client.free(lease.id)
    assert all(w.error is None for w in waiters)
