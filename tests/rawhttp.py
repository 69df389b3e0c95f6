"""Speaking HTTP to the daemon by hand, for requests the client would never send."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any


def request_bytes(method: str, path: str, body: bytes = b"") -> bytes:
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def connect(socket_path: Path, timeout: float = 10.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(str(socket_path))
    return sock


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def parse_response(raw: bytes) -> tuple[int, Any] | None:
    """(status, JSON body) of a whole response; None when nothing came."""
    if not raw:
        return None
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    return status, json.loads(body) if body else None


def exchange(socket_path: Path, method: str, path: str, body: bytes = b"") -> tuple[int, Any]:
    """One request on its own connection; its status and JSON answer."""
    with connect(socket_path) as sock:
        sock.sendall(request_bytes(method, path, body))
        answer = parse_response(read_all(sock))
    assert answer is not None, "the daemon closed the connection without an answer"
    return answer
