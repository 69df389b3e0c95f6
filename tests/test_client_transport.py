"""The client's transport: keep-alive, safe reconnects, HTTP framing, and whom it trusts."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web
from gpulease import Client, DaemonUnavailable, GpusUnavailable, ProtocolError
from gpulease.transport import Transport

from tests.harness import ThreadDaemon, wait_for
from tests.unix_servers import (
    ScriptedServer,
    aiohttp_in_thread,
    chunked_answer,
    json_answer,
    read_request,
    wait_readable,
)

# Keep-alive and reconnects against the real daemon -------------------------------------------


def test_requests_share_one_kept_alive_connection(daemon: ThreadDaemon) -> None:
    """Successive requests, reads and writes alike, travel on one connection."""
    transport = Transport(daemon.paths.socket)
    lease = transport.request("POST", "/v1/leases", {"count": 1, "label": "keep-alive"})
    transport.request("GET", "/v1/health")
    transport.request("DELETE", f"/v1/leases/{lease['id']}")
    transport.close()
    assert transport.connections_opened == 1


def test_reconnects_when_the_daemon_closed_the_idle_connection(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """A restart closes the kept-alive connection; the next request opens a new one."""
    first = start_daemon(default_policy="simple")
    transport = Transport(first.paths.socket)
    granted = transport.request("POST", "/v1/leases", {"count": 1})
    first.stop()
    start_daemon(default_policy="simple")
    assert transport.request("GET", f"/v1/leases/{granted['id']}")["id"] == granted["id"]
    assert transport.connections_opened == 2
    transport.close()


def test_abort_from_another_thread_ends_a_wait_and_the_queued_request(
    daemon: ThreadDaemon,
) -> None:
    """A waiting allocate hung up by `abort()` fails at once with DaemonUnavailable (not
    retried as a restart), the daemon drops the request, and the client sends nothing more."""
    with daemon.client() as root:
        held = root.allocate(4)
        waiting = daemon.client()
        outcome: list[BaseException] = []

        def wait() -> None:
            try:
                waiting.allocate(1, wait=True)
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        wait_for(lambda: len(root.queue()) == 1, 10, what="the request queued")
        waiting.abort()
        thread.join(10)
        assert not thread.is_alive() and isinstance(outcome[0], DaemonUnavailable)
        wait_for(lambda: root.queue() == [], 10, what="the request left the queue")
        assert waiting.aborted
        with pytest.raises(DaemonUnavailable):
            waiting.health()
        waiting.close()
        assert [lease.id for lease in root.leases()] == [held.id]


def test_no_daemon_error_names_the_socket_and_what_to_check(short_dir: Path) -> None:
    """With nothing on the socket, DaemonUnavailable says where it looked and what to check."""
    path = short_dir / "none.sock"
    with Client(path) as client, pytest.raises(DaemonUnavailable) as raised:
        client.health()
    assert f"no gpuallocd answers on {path}" in raised.value.message
    assert "GPUALLOCD_SOCKET" in raised.value.message


def test_importing_gpulease_leaves_http_client_unloaded() -> None:
    """`import gpulease` does not import http.client (nor the email parser it drags in)."""
    probe = (
        "import sys, gpulease; print(sorted({'http.client', 'email.parser'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# A full backlog: waited out within the timeout, never a request sent twice -----------------


@contextmanager
def full_backlog(path: Path) -> Iterator[socket.socket]:
    """A listener with room for one connection not yet accepted, and that one taken."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(0)
    filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    filler.connect(str(path))
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(5)
    with pytest.raises(BlockingIOError):
        probe.connect(str(path))  # as a client with a timeout finds it
    probe.close()
    try:
        yield listener
    finally:
        filler.close()
        listener.close()


def test_a_full_backlog_is_waited_out_within_the_timeout(short_dir: Path) -> None:
    """A daemon with a burst of connections still to accept: a client that finds its backlog
    full tries again until there is room, and its request reaches the daemon once."""
    path = short_dir / "full.sock"
    with full_backlog(path) as listener:
        received: list[bytes] = []

        def accept_later() -> None:
            time.sleep(0.5)  # the client's first try meets the full backlog
            listener.accept()[0].close()  # the one ahead of it: room for the client
            conn, _ = listener.accept()
            received.append(read_request(conn))
            conn.sendall(json_answer({"n": 1}))
            conn.close()

        server = threading.Thread(target=accept_later)
        server.start()
        transport = Transport(path, timeout=30)
        try:
            assert transport.request("POST", "/v1/leases", {"count": 1}) == {"n": 1}
        finally:
            server.join(30)
            transport.close()
    assert len(received) == 1 and received[0].startswith(b"POST /v1/leases ")


def test_a_backlog_that_stays_full_fails_within_the_timeout_having_sent_nothing(
    short_dir: Path,
) -> None:
    """A backlog that never drains: DaemonUnavailable once the timeout has passed, the daemon
    reached (it is there, busy), and no connection made, so nothing sent."""
    with full_backlog(short_dir / "full.sock") as listener:
        transport = Transport(listener.getsockname(), timeout=0.3)
        with pytest.raises(DaemonUnavailable, match=r"did not answer within 0\.3 s") as raised:
            transport.request("POST", "/v1/leases", {"count": 1})
        assert raised.value.reached
        assert transport.connections_opened == 0


# Framing and resending, against scripted servers --------------------------------------------


@pytest.fixture
def serve(short_dir: Path) -> Iterator[Callable[..., ScriptedServer]]:
    """Start a ScriptedServer on a fresh socket; its handlers' errors fail the test."""
    servers: list[ScriptedServer] = []

    def start(*script: Callable[[socket.socket], None]) -> ScriptedServer:
        server = ScriptedServer(short_dir / f"scripted-{len(servers)}.sock", script)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.finish()


def answer_each(*answers: bytes) -> Callable[[socket.socket], None]:
    """A handler that reads one request per answer and sends it, keeping the connection."""

    def handler(conn: socket.socket) -> None:
        for answer in answers:
            read_request(conn)
            conn.sendall(answer)

    return handler


def test_chunked_answer_is_decoded_and_the_connection_kept(
    serve: Callable[..., ScriptedServer],
) -> None:
    """Chunks (with extensions and a trailer) join into the body; the connection stays open."""
    server = serve(
        answer_each(chunked_answer([b'{"parts": [1, ', b"2, 3", b"]}"]), json_answer({}))
    )
    transport = Transport(server.path)
    assert transport.request("GET", "/chunked") == {"parts": [1, 2, 3]}
    assert transport.request("GET", "/after") == {}
    assert transport.connections_opened == 1
    transport.close()


def test_chunked_error_answer_raises_its_error_class(serve: Callable[..., ScriptedServer]) -> None:
    """An error envelope sent in chunks still becomes the exception class of its code."""
    envelope = b'{"error": {"code": "gpus_unavailable", "message": "all busy"}}'
    server = serve(answer_each(chunked_answer([envelope[:20], envelope[20:]], status=409)))
    with Client(server.path) as client, pytest.raises(GpusUnavailable, match="all busy"):
        client.allocate(1)


def test_connection_close_answer_opens_a_new_connection(
    serve: Callable[..., ScriptedServer],
) -> None:
    """After an answer with Connection: close, the next request goes on a new connection."""
    server = serve(
        answer_each(json_answer({"n": 1}, close=True)), answer_each(json_answer({"n": 2}))
    )
    transport = Transport(server.path)
    assert [transport.request("GET", "/"), transport.request("GET", "/")] == [{"n": 1}, {"n": 2}]
    assert transport.connections_opened == 2
    transport.close()


def test_answer_without_length_ends_with_the_connection(
    serve: Callable[..., ScriptedServer],
) -> None:
    """An answer with neither Content-Length nor chunks runs to the end of the connection."""

    def handler(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"end": ')
        conn.sendall(b"true}")
        conn.close()

    transport = Transport(serve(handler).path)
    assert transport.request("GET", "/") == {"end": True}
    transport.close()


def test_bytes_beyond_an_answer_retire_the_connection(
    serve: Callable[..., ScriptedServer],
) -> None:
    """An answer followed by stray bytes is returned; the next request takes a new connection."""

    def answer_with_trailing_junk(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(json_answer({"n": 1}) + b"HTTP/1.1 200 stray\r\n")

    server = serve(answer_with_trailing_junk, answer_each(json_answer({"n": 2})))
    transport = Transport(server.path)
    assert [transport.request("GET", "/"), transport.request("GET", "/")] == [{"n": 1}, {"n": 2}]
    assert transport.connections_opened == 2
    transport.close()


def test_malformed_status_line_raises_protocol_error(serve: Callable[..., ScriptedServer]) -> None:
    """An answer that is not HTTP/1.x raises ProtocolError."""
    server = serve(answer_each(b"SSH-2.0-OpenSSH\r\n\r\n"))
    with Client(server.path) as client, pytest.raises(ProtocolError, match="status line"):
        client.health()


def test_request_the_server_closed_unread_is_resent(serve: Callable[..., ScriptedServer]) -> None:
    """A server closing a kept-alive connection with the request unread gets it again, anew."""
    seen: list[bytes] = []

    def close_with_second_request_unread(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(json_answer({"n": 1}))
        wait_readable(conn)
        conn.close()

    def record(conn: socket.socket) -> None:
        seen.append(read_request(conn))
        conn.sendall(json_answer({"n": 2}))

    server = serve(close_with_second_request_unread, record)
    transport = Transport(server.path)
    transport.request("GET", "/v1/health")
    assert transport.request("POST", "/v1/leases", {"count": 1}) == {"n": 2}
    assert transport.connections_opened == 2
    server.finish()
    assert len(seen) == 1 and seen[0].startswith(b"POST /v1/leases ")
    transport.close()


def test_request_refused_on_write_is_resent(serve: Callable[..., ScriptedServer]) -> None:
    """A kept-alive connection whose server stopped reading fails the write; it is resent."""

    def stop_reading_after_first(conn: socket.socket) -> None:
        read_request(conn)
        conn.shutdown(socket.SHUT_RD)
        conn.sendall(json_answer({"n": 1}))

    server = serve(stop_reading_after_first, answer_each(json_answer({"n": 2})))
    transport = Transport(server.path)
    assert transport.request("GET", "/") == {"n": 1}
    assert transport.request("POST", "/v1/leases", {"count": 1}) == {"n": 2}
    transport.close()


def test_request_the_server_read_before_closing_is_not_resent(
    serve: Callable[..., ScriptedServer],
) -> None:
    """A server that read the request and hung up may have acted on it: no second try."""

    def read_second_then_close(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(json_answer({"n": 1}))
        read_request(conn)
        conn.close()

    server = serve(read_second_then_close)
    transport = Transport(server.path)
    transport.request("GET", "/")
    with pytest.raises(DaemonUnavailable, match="may or may not have been carried out"):
        transport.request("POST", "/v1/leases", {"count": 1})
    assert not server.has_waiting_connection()
    assert transport.connections_opened == 1


def test_aiohttp_chunked_stream_is_read_whole(short_dir: Path) -> None:
    """A chunked answer written piecewise by aiohttp arrives whole, and keep-alive holds."""

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for piece in (b'{"waiters": [', b'"a", ', b'"b"]}'):
            await response.write(piece)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/stream", stream)
    with aiohttp_in_thread(app, short_dir / "aio.sock") as path:
        transport = Transport(path)
        assert transport.request("GET", "/stream") == {"waiters": ["a", "b"]}
        assert transport.request("GET", "/stream") == {"waiters": ["a", "b"]}
        assert transport.connections_opened == 1
        transport.close()
