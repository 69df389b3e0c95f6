"""Just enough HTTP/1.1 for the daemon's API: one request out, one answer in, on a socket.

The request is a fixed request line with Host, Content-Type and Content-Length. An answer is
read in full: the status line, the headers, then the body framed by Transfer-Encoding: chunked,
by Content-Length, or by the end of the connection (RFC 9112, section 6.3). Anything else
raises ProtocolError. Written on `socket` alone: `http.client` imports the email parser, which
costs a command-line tool 10 to 25 ms before its first request.
"""

from __future__ import annotations

import socket

from gpulease.errors import ProtocolError

__all__ = ["Answer", "AnswerReader", "ConnectionClosed", "encode_request"]

_MAX_LINE = 65536  # bytes in a status line, header line or chunk-size line
_MAX_HEADERS = 100
_RECV_SIZE = 65536
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


class ConnectionClosed(Exception):
    """The server closed the connection before the answer was complete."""


def encode_request(method: str, path: str, payload: bytes | None) -> bytes:
    """The bytes of one request; a body is always JSON."""
    if not method or not set(method.encode("ascii", "replace")) <= _TOKEN:
        raise ValueError(f"not an HTTP method: {method!r}")
    if not path.startswith("/") or not (path.isascii() and path.isprintable()) or " " in path:
        raise ValueError(f"not a request target (quote it): {path!r}")
    head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n"
    if payload is None:
        return f"{head}Content-Length: 0\r\n\r\n".encode("ascii")
    head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    return head.encode("ascii") + payload


class Answer:
    """A complete answer. `keep_alive` is False when the server closes the connection after it."""

    __slots__ = ("body", "keep_alive", "status")

    def __init__(self, status: int, body: bytes, keep_alive: bool) -> None:
        self.status = status
        self.body = body
        self.keep_alive = keep_alive


class AnswerReader:
    """Reads answers from one connected socket, through its own buffer.

    `received` counts the bytes that arrived since the last `start()`: zero means the server
    sent nothing of the answer.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self.received = 0

    def read_answer(self, method: str) -> Answer:
        """The next complete answer to a request made with `method`."""
        self._buffer.clear()
        self.received = 0
        status, version, headers = self._head()
        while 100 <= status < 200 and status != 101:  # interim answers precede the real one
            status, version, headers = self._head()
        keep_alive = _keeps_alive(version, headers.get("connection", ""))
        body, framed = self._body(method, status, headers)
        # Bytes beyond the answer answer nothing we asked: keep the answer, not the connection.
        return Answer(status, body, keep_alive and framed and not self._buffer)

    # Framing --------------------------------------------------------------------------------

    def _head(self) -> tuple[int, str, dict[str, str]]:
        """The status, the HTTP version and the headers of the next answer: its lines up to
        the blank one, read whole rather than line by line."""
        start = 0
        while (end := self._buffer.find(b"\r\n\r\n", start)) < 0:
            self._check_unfinished_head()
            start = max(len(self._buffer) - 3, 0)
            self._fill()
        lines = bytes(self._buffer[:end]).decode("latin-1").split("\r\n")
        del self._buffer[: end + 4]
        if len(lines) > _MAX_HEADERS + 1:
            raise ProtocolError(f"more than {_MAX_HEADERS} header lines")
        if any(len(line) > _MAX_LINE for line in lines):
            raise ProtocolError(f"a line of the answer is longer than {_MAX_LINE} bytes")
        status, version = _status_line(lines[0])
        return status, version, _headers(lines[1:])

    def _check_unfinished_head(self) -> None:
        """Refuse a head that is already wrong before its end has arrived: a status line
        that is none (a server that is no HTTP server is not waited on), a line or a count of
        lines over the limits."""
        first_end = self._buffer.find(b"\r\n")
        if first_end >= 0:
            _status_line(bytes(self._buffer[:first_end]).decode("latin-1"))
        last_end = self._buffer.rfind(b"\r\n")
        if len(self._buffer) - (last_end + 2 if last_end >= 0 else 0) > _MAX_LINE:
            raise ProtocolError(f"a line of the answer is longer than {_MAX_LINE} bytes")
        if self._buffer.count(b"\r\n") > _MAX_HEADERS + 1:
            raise ProtocolError(f"more than {_MAX_HEADERS} header lines")

    def _body(self, method: str, status: int, headers: dict[str, str]) -> tuple[bytes, bool]:
        """The body, and whether its end was framed (else the connection's end marked it)."""
        if method == "HEAD" or status in (204, 304):
            return b"", True
        codings = [c.strip().lower() for c in headers.get("transfer-encoding", "").split(",")]
        if codings[-1] == "chunked":
            if len(codings) > 1:
                raise ProtocolError(f"unsupported transfer coding: {headers['transfer-encoding']}")
            return self._chunked(), True
        if codings != [""]:
            return self._until_closed(), False
        if "content-length" in headers:
            return self._exactly(_content_length(headers["content-length"])), True
        return self._until_closed(), False

    def _chunked(self) -> bytes:
        chunks = []
        while True:
            size_text = self._line().partition(";")[0].strip(" \t")
            if not size_text or not set(size_text) <= _HEX_DIGITS:
                raise ProtocolError(f"malformed chunk size: {size_text[:80]!r}")
            size = int(size_text, 16)
            if size == 0:
                break
            chunks.append(self._exactly(size))
            if self._line():
                raise ProtocolError("a chunk is longer than its size says")
        while self._line():  # trailer fields, ignored
            pass
        return b"".join(chunks)

    # Bytes ----------------------------------------------------------------------------------

    def _fill(self) -> None:
        data = self._sock.recv(_RECV_SIZE)
        if not data:
            raise ConnectionClosed(
                f"the daemon closed the connection after {self.received} byte(s) of its answer"
            )
        self.received += len(data)
        self._buffer += data

    def _line(self) -> str:
        start = 0
        while (end := self._buffer.find(b"\r\n", start)) < 0:
            if len(self._buffer) > _MAX_LINE:
                raise ProtocolError(f"a line of the answer is longer than {_MAX_LINE} bytes")
            start = max(len(self._buffer) - 1, 0)
            self._fill()
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line.decode("latin-1")

    def _exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _until_closed(self) -> bytes:
        try:
            while True:
                self._fill()
        except ConnectionClosed:
            pass
        data = bytes(self._buffer)
        self._buffer.clear()
        return data


def _status_line(line: str) -> tuple[int, str]:
    parts = line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not _is_number(parts[1]):
        raise ProtocolError(f"not an HTTP/1.x status line: {line[:80]!r}")
    return int(parts[1]), parts[0]


def _headers(lines: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"malformed header line: {line[:80]!r}")
        key = name.lower()
        value = value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def _content_length(text: str) -> int:
    values = {v.strip() for v in text.split(",")}
    value = values.pop() if len(values) == 1 else ""
    if not _is_number(value):
        raise ProtocolError(f"malformed Content-Length: {text[:80]!r}")
    return int(value)


def _keeps_alive(version: str, connection: str) -> bool:
    tokens = {t.strip().lower() for t in connection.split(",")}
    if "close" in tokens:
        return False
    return version != "HTTP/1.0" or "keep-alive" in tokens


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()
