"""HTTP/1.1 + JSON over the daemon's Unix socket: one keep-alive connection, shared by threads.

Built on `socket` alone (see `gpulease.http11`). Each new connection is checked before
anything is sent on it: the server must run as a user the client trusts (`gpulease.trust`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import threading
import time
from typing import Any

from gpulease.errors import DaemonUnavailable, ProtocolError, error_from_envelope
from gpulease.http11 import Answer, AnswerReader, ConnectionClosed, encode_request
from gpulease.trust import ServerUid, UntrustedServer, allowed_server_uids, check_server

__all__ = [
    "DEFAULT_SOCKET",
    "DEFAULT_TIMEOUT",
    "Transport",
    "UntrustedServer",
    "resolve_socket",
]

DEFAULT_SOCKET = "/run/gpuallocd/gpuallocd.sock"
DEFAULT_TIMEOUT = 30.0  # seconds that one connect, send or receive may take
# Open a new connection rather than reuse one idle for longer than this: well inside the
# daemon's keep-alive timeout (300 s), so the daemon is never closing the one we write on.
_MAX_IDLE_SECONDS = 60.0
# A connect refused for a full backlog is tried again after these pauses (doubling).
_FIRST_BACKLOG_PAUSE = 0.005
_MAX_BACKLOG_PAUSE = 0.25


def resolve_socket(socket_path: str | os.PathLike[str] | None = None) -> str:
    """The argument, else $GPUALLOCD_SOCKET, else the default path."""
    if socket_path is not None:
        return os.fspath(socket_path)
    return os.environ.get("GPUALLOCD_SOCKET") or DEFAULT_SOCKET


def _socket_timeout(timeout: float | None, default: float | None) -> float | None:
    """A timeout for the socket module: None is `default`, math.inf is None (no limit)."""
    if timeout is None:
        return default
    if math.isinf(timeout):
        return None
    if not timeout > 0:
        raise ValueError(f"a timeout must be positive (math.inf: no limit), not {timeout!r}")
    return float(timeout)


class _NotDelivered(Exception):
    """The server closed a reused connection before it read the request: safe to resend."""


class _Connection:
    """A connected socket that was checked to be served by a trusted user."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = AnswerReader(sock)
        self.last_used = time.monotonic()

    def closed_by_server(self) -> bool:
        """Whether the server hung up (or wrote out of turn) while the connection was idle."""
        self.sock.setblocking(False)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return False  # nothing to read: still open
        except OSError:
            return True
        return True  # end of file, or bytes that answer nothing we asked

    def close(self) -> None:
        self.sock.close()


class Transport:
    """One keep-alive connection to the daemon, safe to share between threads.

    `timeout`: seconds one connect, send or receive may take (None: 30; math.inf: no limit).
    `server_uid`: users, besides root and the caller, whose server to trust (else
    $GPUALLOCD_SERVER_UID): a uid or user name, several as a list or comma-separated.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        timeout: float | None = None,
        server_uid: ServerUid | None = None,
    ) -> None:
        self.socket_path = resolve_socket(socket_path)
        self._timeout = _socket_timeout(timeout, DEFAULT_TIMEOUT)
        self._trusted_uids = allowed_server_uids(server_uid)
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self._aborted = False
        self.connections_opened = 0  # how many connections were opened (and checked)

    def close(self) -> None:
        with self._lock:
            self._drop()

    @property
    def aborted(self) -> bool:
        return self._aborted

    def abort(self) -> None:
        """Hang up now, from any thread: a request in flight fails with DaemonUnavailable
        (the daemon drops a waiting request whose client hung up), and so does any later
        one. Does not wait for the lock that the request in flight holds."""
        self._aborted = True
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Send one request; the decoded JSON answer, or the error its envelope names.

        `timeout` overrides the transport's for this request; `math.inf` waits for ever.
        """
        payload = None if body is None else json.dumps(body).encode()
        message = encode_request(method, path, payload)
        limit = _socket_timeout(timeout, self._timeout)
        with self._lock:
            try:
                answer = self._exchange(message, method, limit)
            except BaseException:
                self._drop()  # the connection is in an unknown state (even after ^C)
                raise
        try:
            data = json.loads(answer.body) if answer.body else {}
        except ValueError:
            raise ProtocolError(f"the daemon answered HTTP {answer.status} with non-JSON") from None
        if answer.status >= 400:
            raise error_from_envelope(answer.status, data)
        return data

    def _exchange(self, message: bytes, method: str, timeout: float | None) -> Answer:
        conn = self._idle_connection()
        if conn is not None:
            try:
                return self._round_trip(conn, message, method, timeout, reused=True)
            except _NotDelivered:
                self._drop()  # the daemon closed it unread (a restart, an idle timeout)
        return self._round_trip(self._open(timeout), message, method, timeout, reused=False)

    def _idle_connection(self) -> _Connection | None:
        """The kept-alive connection, if it is recent and the server has not closed it."""
        conn = self._conn
        if conn is None:
            return None
        if time.monotonic() - conn.last_used > _MAX_IDLE_SECONDS or conn.closed_by_server():
            self._drop()
            return None
        return conn

    def _open(self, timeout: float | None) -> _Connection:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            self._connect(sock, timeout)
            check_server(sock, self.socket_path, self._trusted_uids)
        except UntrustedServer:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            raise self._unavailable(exc, timeout) from None
        self.connections_opened += 1
        self._conn = _Connection(sock)
        if self._aborted:  # abort() ran while this connection was being opened
            self._drop()
            raise DaemonUnavailable(f"the connection to {self.socket_path} was hung up")
        return self._conn

    def _connect(self, sock: socket.socket, timeout: float | None) -> None:
        """Connect, waiting out a full backlog for at most `timeout` seconds.

        A Unix socket whose backlog is full refuses a connect with EAGAIN at once where the
        socket has a timeout (the kernel waits only for a blocking one): the daemon is there
        but has a burst of connections still to accept. Nothing was sent, so connecting again
        is safe; it is tried again after a pause that doubles up to `_MAX_BACKLOG_PAUSE`,
        each varied a little so that a crowd of clients does not come back all at once.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = _FIRST_BACKLOG_PAUSE
        while True:
            try:
                sock.connect(self.socket_path)
                return
            except BlockingIOError:
                if self._aborted:
                    raise ConnectionAbortedError("hung up while the backlog was full") from None
                left = math.inf if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the daemon's backlog stayed full") from None
                time.sleep(min(left, pause * (0.5 + time.monotonic_ns() % 1000 / 1000)))
                pause = min(2 * pause, _MAX_BACKLOG_PAUSE)

    def _round_trip(
        self, conn: _Connection, message: bytes, method: str, timeout: float | None, reused: bool
    ) -> Answer:
        """Send `message` and read its answer, or raise _NotDelivered when resending is safe.

        A request must never reach the daemon twice: an allocation would be granted twice.
        So it is resent only when the daemon cannot have read it, which on a reused
        connection the kernel tells apart from every other failure:
        - EPIPE or ECONNRESET while writing: the daemon had closed the connection;
        - ECONNRESET before the first byte of the answer: on Linux, a Unix stream socket
          reports ECONNRESET (rather than end-of-file) when its peer closed it with data
          still unread, so the daemon closed without reading the whole request.
        A clean end-of-file before the answer means the daemon read the request and then
        went away (a crash, a restart): it may have acted on it, so that is not resent.
        A connection opened for this request is never retried: the error is the answer.
        """
        conn.sock.settimeout(timeout)
        try:
            conn.sock.sendall(message)
        except (BrokenPipeError, ConnectionResetError) as exc:
            if reused:
                raise _NotDelivered from None
            raise self._unavailable(exc, timeout) from None
        except OSError as exc:
            raise self._unavailable(exc, timeout) from None
        try:
            answer = conn.reader.read_answer(method)
        except ConnectionResetError as exc:
            if reused and conn.reader.received == 0:
                raise _NotDelivered from None
            raise self._unavailable(exc, timeout) from None
        except ConnectionClosed:
            raise DaemonUnavailable(
                f"gpuallocd on {self.socket_path} closed the connection before its answer was "
                "complete (did it stop?); the request may or may not have been carried out"
            ) from None
        except OSError as exc:
            raise self._unavailable(exc, timeout) from None
        conn.last_used = time.monotonic()
        if not answer.keep_alive:
            self._drop()
        return answer

    def _unavailable(self, exc: OSError, timeout: float | None) -> DaemonUnavailable:
        error = self._unavailable_error(exc, timeout)
        error.reached = not isinstance(
            exc, (FileNotFoundError, ConnectionRefusedError, PermissionError)
        )
        return error

    def _unavailable_error(self, exc: OSError, timeout: float | None) -> DaemonUnavailable:
        path = self.socket_path
        if isinstance(exc, (FileNotFoundError, ConnectionRefusedError)):
            return DaemonUnavailable(
                f"no gpuallocd answers on {path} ({exc.strerror}); is the daemon "
                "running, and is GPUALLOCD_SOCKET right?"
            )
        if isinstance(exc, PermissionError):
            from gpulease.socket_access import permission_denied_message

            denied = DaemonUnavailable(permission_denied_message(str(path)))
            denied.denied = True
            return denied
        if isinstance(exc, TimeoutError):
            return DaemonUnavailable(f"gpuallocd on {path} did not answer within {timeout} s")
        return DaemonUnavailable(f"lost the connection to gpuallocd on {path}: {exc}")

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
