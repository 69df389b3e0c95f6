"""A bare HTTP/1.1 client on a Unix socket, for benchmarks only.

It sends fixed requests and reads answers with `Content-Length`, nothing more: the time a
benchmark measures through it is the daemon's, not a client library's. `python -m
benchmarks.bench --raw` drives the daemon with it; real callers use `gpulease`.
"""

from __future__ import annotations

import json
import socket
from typing import Any

__all__ = ["RawClient", "RawHttpError"]


class RawHttpError(Exception):
    """The daemon answered with an error status; `code` is the envelope's error code."""

    def __init__(self, status: int, code: str) -> None:
        super().__init__(f"HTTP {status} {code}")
        self.status = status
        self.code = code


class RawClient:
    """One keep-alive connection; allocate and free only."""

    def __init__(self, path: str) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        self._buffer = b""

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def health(self) -> None:
        self._request(b"GET /v1/health HTTP/1.1\r\nHost: gpuallocd\r\n\r\n")

    def allocate(self, count: int, policy: str | None = None) -> str:
        """A detached lease of `count` GPUs; its id."""
        fields: dict[str, Any] = {"count": count, "label": "bench"}
        if policy is not None:
            fields["policy"] = policy
        body = json.dumps(fields).encode()
        head = (
            b"POST /v1/leases HTTP/1.1\r\nHost: gpuallocd\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        lease_id: str = self._request(head + body)["id"]
        return lease_id

    def free(self, lease_id: str) -> None:
        self._request(
            b"DELETE /v1/leases/%s HTTP/1.1\r\nHost: gpuallocd\r\n\r\n" % lease_id.encode()
        )

    def _request(self, raw: bytes) -> Any:
        self._sock.sendall(raw)
        head = self._read_until(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        data = json.loads(self._read_exactly(length)) if length else {}
        if status >= 400:
            raise RawHttpError(status, str(data.get("error", {}).get("code", "unknown")))
        return data

    def _fill(self) -> None:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        self._buffer += chunk

    def _read_until(self, marker: bytes) -> bytes:
        while (end := self._buffer.find(marker)) < 0:
            self._fill()
        head, self._buffer = self._buffer[:end], self._buffer[end + len(marker) :]
        return head

    def _read_exactly(self, length: int) -> bytes:
        while len(self._buffer) < length:
            self._fill()
        data, self._buffer = self._buffer[:length], self._buffer[length:]
        return data
