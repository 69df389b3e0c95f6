"""HTTP/1.1 + JSON over the daemon's Unix socket, with the standard library alone."""

from __future__ import annotations

import http.client
import json
import math
import os
import socket
import threading
import time
from typing import Any

from gpulease.errors import DaemonUnavailable, ProtocolError, error_from_envelope

__all__ = ["DEFAULT_SOCKET", "Transport", "resolve_socket"]

DEFAULT_SOCKET = "/run/gpuallocd/gpuallocd.sock"
# Reconnect rather than reuse a connection idle for longer than this: the daemon closes
# idle keep-alive connections after a while, and a request on a closed one is lost.
_MAX_IDLE_SECONDS = 60.0


def resolve_socket(socket_path: str | os.PathLike[str] | None = None) -> str:
    """The argument, else $GPUALLOCD_SOCKET, else the default path."""
    if socket_path is not None:
        return os.fspath(socket_path)
    return os.environ.get("GPUALLOCD_SOCKET") or DEFAULT_SOCKET


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection whose connect() opens a Unix socket."""

    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Transport:
    """One keep-alive connection to the daemon, safe to share between threads."""

    def __init__(self, socket_path: str | None = None, *, timeout: float | None = 30.0) -> None:
        self.socket_path = resolve_socket(socket_path)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._conn: UnixHTTPConnection | None = None
        self._last_used = 0.0

    def close(self) -> None:
        with self._lock:
            self._drop()

    def request(
        self, method: str, path: str, body: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Send one request; the decoded JSON answer, or the error its envelope names.

        `timeout` overrides the transport's for this request; `math.inf` waits for ever.
        """
        payload = None if body is None else json.dumps(body).encode()
        with self._lock:
            status, raw = self._exchange(method, path, payload, timeout)
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            raise ProtocolError(f"the daemon answered HTTP {status} with non-JSON") from None
        if status >= 400:
            raise error_from_envelope(status, data)
        return data

    def _connection(self, timeout: float | None) -> UnixHTTPConnection:
        if self._conn is not None and time.monotonic() - self._last_used > _MAX_IDLE_SECONDS:
            self._drop()
        if self._conn is None:
            self._conn = UnixHTTPConnection(self.socket_path, self._timeout)
        if timeout is None:
            timeout = self._timeout
        elif math.isinf(timeout):
            timeout = None  # wait as long as it takes
        self._conn.timeout = timeout
        if self._conn.sock is not None:
            self._conn.sock.settimeout(self._conn.timeout)
        return self._conn

    def _exchange(
        self, method: str, path: str, payload: bytes | None, timeout: float | None
    ) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        conn = self._connection(timeout)
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            self._drop()
            raise DaemonUnavailable(
                f"no gpuallocd answers on {self.socket_path} ({exc.strerror}); is the daemon "
                "running, and is GPUALLOCD_SOCKET right?"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise DaemonUnavailable(f"lost the connection to gpuallocd: {exc}") from None
        self._last_used = time.monotonic()
        if response.will_close:
            self._drop()
        return response.status, raw

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
