"""Bad input gets a 4xx with a stable code and a message, and changes nothing."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest
from gpulease import Client, GpuallocError

from tests.harness import ThreadDaemon


def ledger_state(client: Client) -> tuple[Any, ...]:
    leases = tuple(lease.id for lease in client.leases())
    return leases, len(client.history(limit=10_000))


def raw_exchange(socket_path: str, payload: bytes) -> tuple[int, dict[str, Any]]:
    """Send raw bytes on the socket; the status and the JSON body of the answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(socket_path)
        sock.sendall(payload)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, json.loads(body)


BAD_ALLOCATIONS = [
    ({"count": 0}, 400, "invalid_request"),
    ({"count": -2}, 400, "invalid_request"),
    ({"count": "2"}, 400, "invalid_request"),
    ({"count": 2.5}, 400, "invalid_request"),
    ({"count": True}, 400, "invalid_request"),
    ({"count": 5}, 400, "count_exceeds_node"),
    ({}, 400, "invalid_request"),
    ({"cont": 1}, 400, "invalid_request"),
    ({"gpus": []}, 400, "invalid_request"),
    ({"gpus": [9]}, 404, "unknown_gpu"),
    ({"gpus": ["GPU-nope"]}, 404, "unknown_gpu"),
    ({"gpus": [-1]}, 400, "invalid_request"),
    ({"gpus": [0, 0]}, 400, "invalid_request"),
    ({"gpus": [0, 1], "count": 1}, 400, "invalid_request"),
    ({"count": 1, "ttl_seconds": -5}, 400, "invalid_request"),
    ({"count": 1, "ttl_seconds": 0}, 400, "invalid_request"),
    ({"count": 1, "ttl_seconds": "1h"}, 400, "invalid_request"),
    ({"count": 1, "ttl_seconds": 10**9}, 400, "invalid_request"),
    ({"count": 1, "policy": "no-such-policy"}, 400, "unknown_policy"),
    ({"count": 1, "label": 7}, 400, "invalid_request"),
    ({"count": 1, "label": "x" * 201}, 400, "invalid_request"),
    ({"count": 1, "wait": "yes"}, 400, "invalid_request"),
    ({"count": 1, "min_free_memory_bytes": -1}, 400, "invalid_request"),
]


@pytest.mark.parametrize(("body", "status", "code"), BAD_ALLOCATIONS)
def test_bad_allocation_is_refused_with_a_code(
    daemon: ThreadDaemon, body: dict[str, Any], status: int, code: str
) -> None:
    """Each malformed allocation gets its documented status and code, and changes nothing."""
    with daemon.client() as client:
        client.allocate(1)
        before = ledger_state(client)
        with pytest.raises(GpuallocError) as info:
            client.request("POST", "/v1/leases", body)
        assert (info.value.status, info.value.code) == (status, code)
        assert info.value.message
        assert ledger_state(client) == before


def test_body_that_is_not_json_is_malformed_json(daemon: ThreadDaemon) -> None:
    """A body that does not parse is malformed_json."""
    body = b'{"count": '
    request = (
        b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    status, answer = raw_exchange(str(daemon.paths.socket), request)
    assert status == 400 and answer["error"]["code"] == "malformed_json"


def test_json_that_is_not_an_object_is_invalid(daemon: ThreadDaemon) -> None:
    """A JSON array or number is not a request."""
    with daemon.client() as client, pytest.raises(GpuallocError) as info:
        client.request("POST", "/v1/leases", [1, 2])
    assert info.value.code == "invalid_request"


def test_malformed_http_gets_the_envelope(daemon: ThreadDaemon) -> None:
    """Unparseable HTTP gets a 400 with code malformed_http, and the daemon keeps serving."""
    status, answer = raw_exchange(
        str(daemon.paths.socket), b"POST /v1/leases HTTP/1.1\r\nContent-Length: abc\r\n\r\n"
    )
    assert status == 400 and answer["error"]["code"] == "malformed_http"
    with daemon.client() as client:
        assert len(client.status()) == 4


def test_oversized_body_is_refused(daemon: ThreadDaemon) -> None:
    """A body over the limit is body_too_large (413) and changes nothing."""
    with daemon.client() as client:
        before = ledger_state(client)
        with pytest.raises(GpuallocError) as info:
            client.request("POST", "/v1/leases", {"count": 1, "label": "x" * 100_000})
        assert (info.value.status, info.value.code) == (413, "body_too_large")
        assert ledger_state(client) == before


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/nothing", 404, "unknown_route"),
        ("GET", "/", 404, "unknown_route"),
        ("PUT", "/v1/leases", 405, "method_not_allowed"),
        ("GET", "/v1/leases/feedc0ffee00", 404, "unknown_lease"),
        ("DELETE", "/v1/leases/feedc0ffee00", 404, "unknown_lease"),
        ("POST", "/v1/leases/feedc0ffee00/renew", 404, "unknown_lease"),
        ("GET", "/v1/history?limit=0", 400, "invalid_request"),
        ("GET", "/v1/history?limit=x", 400, "invalid_request"),
    ],
)
def test_unknown_things_get_codes(
    daemon: ThreadDaemon, method: str, path: str, status: int, code: str
) -> None:
    """Unknown routes, methods and leases each get their code."""
    with daemon.client() as client, pytest.raises(GpuallocError) as info:
        client.request(method, path)
    assert (info.value.status, info.value.code) == (status, code)


@pytest.mark.parametrize("body", [{"ttl_seconds": -1}, {"ttl_seconds": "x"}, {"ttl": 5}])
def test_bad_renew_changes_nothing(daemon: ThreadDaemon, body: dict[str, Any]) -> None:
    """A renew with a bad TTL is refused and leaves the expiry as it was."""
    with daemon.client() as client:
        lease = client.allocate(1)
        with pytest.raises(GpuallocError) as info:
            client.request("POST", f"/v1/leases/{lease.id}/renew", body)
        assert info.value.code == "invalid_request"
        assert client.lease(lease.id).expires_at == lease.expires_at


def test_server_codes_map_to_client_classes(daemon: ThreadDaemon) -> None:
    """The client raises the exception class named like the server's error."""
    from gpulease import CountExceedsNode, UnknownGpu, UnknownLease

    with daemon.client() as client:
        with pytest.raises(CountExceedsNode):
            client.allocate(99)
        with pytest.raises(UnknownGpu):
            client.allocate_specific([42])
        with pytest.raises(UnknownLease):
            client.free("nope")
