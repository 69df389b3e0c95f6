"""Case 1: a grant and its delivery are one; a retried request gets the same lease."""

from __future__ import annotations

import json
import socket

from tests.harness import ThreadDaemon, wait_for
from tests.rawhttp import connect, exchange, parse_response, read_all, request_bytes

TRIES = 40


def _bound_allocate_then_half_close(daemon: ThreadDaemon) -> str | None:
    """Send a bound allocate, shut our writing side at once; the lease id we got, if any."""
    body = json.dumps({"count": 1, "bind_to_process": True}).encode()
    with connect(daemon.paths.socket) as sock:
        sock.sendall(request_bytes("POST", "/v1/leases", body))
        sock.shutdown(socket.SHUT_WR)
        answer = parse_response(read_all(sock))
    if answer is None or answer[0] != 201:
        return None
    lease_id: str = answer[1]["id"]
    return lease_id


def test_no_lease_outlives_an_answer_that_was_not_delivered(daemon: ThreadDaemon) -> None:
    """40 bound allocates cut off by shutdown(SHUT_WR): every active lease is one a client got."""
    with daemon.client() as client:
        for _ in range(TRIES):
            delivered = _bound_allocate_then_half_close(daemon)

            def settled(delivered: str | None = delivered) -> bool:
                active = {lease.id for lease in client.leases()}
                return active == ({delivered} if delivered else set())

            wait_for(settled, timeout=10)
            if delivered:
                client.free(delivered)


def test_a_waiter_that_hangs_up_gets_no_lease_when_gpus_free(daemon: ThreadDaemon) -> None:
    """A bound waiter whose client left is never granted, even when its GPUs come free."""
    with daemon.client() as client:
        holder = client.allocate(4)
        body = json.dumps({"count": 2, "wait": True, "bind_to_process": True}).encode()
        with connect(daemon.paths.socket) as sock:
            sock.sendall(request_bytes("POST", "/v1/leases", body))
            wait_for(lambda: len(client.queue()) == 1, timeout=10)
        wait_for(lambda: client.queue() == [], timeout=10)
        client.free(holder.id)
        assert client.leases() == []
        assert all(gpu.state == "free" for gpu in client.status())


def test_a_retried_request_id_gets_the_same_lease(daemon: ThreadDaemon) -> None:
    """The same request_id from the same user twice: one lease, returned both times."""
    body = json.dumps({"count": 1, "request_id": "job-17"}).encode()
    first = exchange(daemon.paths.socket, "POST", "/v1/leases", body)
    again = exchange(daemon.paths.socket, "POST", "/v1/leases", body)
    assert first[0] == again[0] == 201
    assert first[1]["id"] == again[1]["id"]
    with daemon.client() as client:
        assert [lease.id for lease in client.leases()] == [first[1]["id"]]
        other = client.allocate(1, request_id="job-18")
        assert other.id != first[1]["id"]
