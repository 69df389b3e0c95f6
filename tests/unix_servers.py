"""Hand-written HTTP servers on Unix sockets, for what a real daemon will not do on cue.

`ScriptedServer` accepts connections in a thread and hands each, in order, to the next
function of its script: answer in chunks, close a connection idle or with a request unread,
shut down its reading side. `aiohttp_in_thread` serves an aiohttp app, for aiohttp's own
framing; `run_as_user` starts `foreign_server.py` as another user.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

Handler = Callable[[socket.socket], None]

FOREIGN_SERVER = Path(__file__).with_name("foreign_server.py")


class ScriptedServer:
    """Serves one connection per handler, in order; later connections wait in the backlog."""

    def __init__(self, path: Path, script: Sequence[Handler]) -> None:
        self.path = path
        self._script = list(script)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(8)
        self._connections: list[socket.socket] = []
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._serve, name="scripted-server", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        for handler in self._script:
            conn, _ = self._listener.accept()
            self._connections.append(conn)
            try:
                handler(conn)
            except BaseException as exc:  # reported by finish() in the test's thread
                self.errors.append(exc)

    def has_waiting_connection(self) -> bool:
        """Whether a client connected beyond the script (it waits in the backlog)."""
        return bool(select.select([self._listener], [], [], 0)[0])

    def finish(self) -> None:
        """Wait for the script to end; raise what a handler raised; close everything."""
        self._thread.join(30)
        for conn in self._connections:
            conn.close()
        self._listener.close()
        assert not self._thread.is_alive(), "the script did not run to its end"
        if self.errors:
            raise self.errors[0]


def wait_readable(conn: socket.socket) -> None:
    """Block until `conn` has bytes (or an end of file) to read, without reading them."""
    select.select([conn], [], [])


def read_request(conn: socket.socket) -> bytes:
    """One whole request (head and Content-Length body) from `conn`, as bytes."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError(f"the client hung up after {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return data


def json_answer(body: Any, status: int = 200, *, close: bool = False) -> bytes:
    """A Content-Length framed JSON answer."""
    payload = json.dumps(body).encode()
    connection = "Connection: close\r\n" if close else ""
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{connection}"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode() + payload


def chunked_answer(parts: Sequence[bytes], status: int = 200) -> bytes:
    """A chunked JSON answer, one chunk per part, with a chunk extension and a trailer."""
    head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n"
    chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(part), part) for part in parts)
    return head.encode() + chunks + b"0\r\nX-Trailer: yes\r\n\r\n"


def run_as_user(socket_dir: Path, uid: int, gid: int) -> tuple[subprocess.Popen[str], Path]:
    """Start foreign_server.py as `uid` in `socket_dir` (given to that user); its socket path."""
    os.chown(socket_dir, uid, gid)
    os.chmod(socket_dir.parent, 0o755)
    path = socket_dir / "s.sock"
    process = subprocess.Popen(
        [sys.executable, str(FOREIGN_SERVER), str(path), str(uid), str(gid)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "listening"
    return process, path


@contextlib.contextmanager
def aiohttp_in_thread(app: web.Application, path: Path) -> Iterator[Path]:
    """Serve `app` on a Unix socket at `path` from an event loop in a thread."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.UnixSite(runner, str(path)).start())
    thread = threading.Thread(target=loop.run_forever, name="aiohttp-server", daemon=True)
    thread.start()
    try:
        yield path
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
