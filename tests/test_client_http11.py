"""The client's HTTP/1.1 reader and writer (gpulease/http11.py): an answer's head read whole,
however it arrives, within its limits; a server that speaks no HTTP is not waited on."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest
from gpulease import Client, ProtocolError
from gpulease.http11 import encode_request
from gpulease.transport import Transport

from tests.test_client_transport import answer_each, serve
from tests.unix_servers import ScriptedServer, json_answer, read_request

__all__ = ["serve"]  # the scripted servers' fixture, shared with test_client_transport.py


def test_an_answer_that_arrives_byte_by_byte_is_read_whole(
    serve: Callable[..., ScriptedServer],
) -> None:
    """A head and body sent one byte at a time read as the same answer, and the connection
    is kept for the next request."""

    def dribble(conn: socket.socket) -> None:
        read_request(conn)
        for byte in json_answer({"slow": [1, 2]}):
            conn.sendall(bytes([byte]))
        read_request(conn)
        conn.sendall(json_answer({"next": True}))

    transport = Transport(serve(dribble).path)
    assert transport.request("GET", "/slow") == {"slow": [1, 2]}
    assert transport.request("GET", "/next") == {"next": True}
    assert transport.connections_opened == 1
    transport.close()


def test_interim_answers_come_before_the_real_one(serve: Callable[..., ScriptedServer]) -> None:
    """`100 Continue` heads are skipped; the answer after them is the one returned."""
    interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\nX-A: 1\r\n\r\n"
    server = serve(answer_each(interim + json_answer({"done": 1})))
    transport = Transport(server.path)
    assert transport.request("GET", "/") == {"done": 1}
    transport.close()


def test_repeated_headers_join_and_names_ignore_case(serve: Callable[..., ScriptedServer]) -> None:
    """`Connection` given twice, in two cases, still closes the connection after the answer."""
    answer = json_answer({"n": 1}).replace(
        b"\r\n\r\n", b"\r\nconnection: x\r\nCONNECTION: close\r\n\r\n", 1
    )
    server = serve(answer_each(answer), answer_each(json_answer({"n": 2})))
    transport = Transport(server.path)
    assert [transport.request("GET", "/"), transport.request("GET", "/")] == [{"n": 1}, {"n": 2}]
    assert transport.connections_opened == 2
    transport.close()


@pytest.mark.parametrize(
    ("head", "says"),
    [
        (b"HTTP/1.1 200 OK\r\n" + b"X-Many: 1\r\n" * 101 + b"\r\n", "header lines"),
        (b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n", "longer than"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header"),
    ],
)
def test_a_head_over_the_limits_raises_protocol_error(
    serve: Callable[..., ScriptedServer], head: bytes, says: str
) -> None:
    """Too many header lines, a line too long, a line that is no header: ProtocolError."""
    server = serve(answer_each(head + b"{}"))
    with Client(server.path) as client, pytest.raises(ProtocolError, match=says):
        client.health()


def test_a_server_that_speaks_no_http_is_not_waited_on(
    serve: Callable[..., ScriptedServer],
) -> None:
    """A first line that is no status line fails at once, though the server keeps the
    connection open and never sends the blank line that ends a head."""

    def banner_then_wait(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
        conn.recv(1)  # until the client hangs up

    server = serve(banner_then_wait)
    with Client(server.path, timeout=600) as client, pytest.raises(ProtocolError, match="status"):
        client.health()


@pytest.mark.parametrize("path", ["/a b", "/caf\u00e9", "/a\x7f", "/a\tb", "/a\nb", "v1"])
def test_a_request_target_that_is_not_plain_ascii_is_refused(path: str) -> None:
    """Spaces, controls, DEL and non-ASCII in a path are refused before anything is sent."""
    with pytest.raises(ValueError, match="request target"):
        encode_request("GET", path, None)


def test_a_quoted_request_target_is_sent_as_it_is() -> None:
    """Printable ASCII, percent escapes and a query pass unchanged."""
    path = "/v1/history?lease=a%20b&limit=5&x=~!*'()"
    assert encode_request("GET", path, None).startswith(f"GET {path} HTTP/1.1\r\n".encode())
