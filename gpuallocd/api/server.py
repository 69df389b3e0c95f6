"""Serving the API on a Unix socket: bind, set its mode, serve, and stop cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from gpuallocd.api.limits import ConnectionLimiter, Peer
from gpuallocd.api.peercred import identity_generation, peer_caller
from gpuallocd.api.tcp_peers import GONE, tcp_peer_key
from gpuallocd.errors import (
    AlreadyRunning,
    ConfigError,
    GpuallocError,
    InternalError,
    MalformedHttp,
    StateUnusable,
)
from gpuallocd.host import users
from gpuallocd.model import Caller

__all__ = [
    "LISTEN_BACKLOG",
    "UnixApiServer",
    "bind_unix_socket",
    "limited_handlers",
    "refuse_if_served",
]

# Idle keep-alive connections stay open long enough for a client's renew interval; a client
# that hangs up cancels its request, so a disconnected waiter leaves the queue at once.
_HANDLER_OPTIONS: dict[str, Any] = {"access_log": None, "keepalive_timeout": 300.0}
_RUNNER_OPTIONS: dict[str, Any] = {**_HANDLER_OPTIONS, "handler_cancellation": True}
# A scraper asks again within a minute or so; a connection idle longer is closed.
_TCP_HANDLER_OPTIONS: dict[str, Any] = {"access_log": None, "keepalive_timeout": 60.0}
_TCP_FAMILIES = (socket.AF_INET, socket.AF_INET6)
# Connections that may wait to be accepted: a burst of a thousand clients (a job array that
# starts at once, a sweep's workers) waits in the kernel instead of being refused. The
# kernel caps it at net.core.somaxconn (4096 since Linux 5.4). asyncio listens again on a
# socket it is given, the one systemd passes too, with its own 100 unless told this.
LISTEN_BACKLOG = 4096


def refuse_if_served(path: Path) -> None:
    """AlreadyRunning where a daemon answers on `path`; a stale socket is no refusal."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return  # a stale socket left by a daemon that died
    finally:
        probe.close()
    raise AlreadyRunning(f"another daemon is already serving on {path}")


def _group_id(name: str) -> int:
    gid = users.group_id(name)
    if gid is None:
        raise ConfigError(f"socket_group {name!r} is not a group on this machine")
    return gid


def bind_unix_socket(path: Path, *, mode: int, group: str | None = None) -> socket.socket:
    """Bind and listen on `path`, then set its mode (and group) before accepting anyone.
    Its directory is the daemon's to prepare first
    (`daemon/startup/integrity.prepare_private_dir`)."""
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise StateUnusable(f"{path} exists and is not a socket")
        refuse_if_served(path)
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, mode)
        if group is not None:
            os.chown(path, -1, _group_id(group))
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        raise StateUnusable(f"cannot serve on {path}: {exc.strerror}") from exc
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class _EnvelopeRequestHandler(RequestHandler):
    """aiohttp's connection handler, but errors raised before routing (unparseable HTTP)
    leave as the JSON envelope too; each connection is counted against its uid's limit, and
    closed when its first request's head does not arrive in time. `peer` keeps the caller of
    the connection, read from the kernel once."""

    __slots__ = ("_head_timeout", "_head_timer", "_limiter", "_uid", "peer", "peer_generation")

    def __init__(
        self, *args: Any, limiter: ConnectionLimiter, head_timeout: float, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._limiter = limiter
        self._uid: Peer | None = None
        self.peer: Caller | None = None
        self.peer_generation: int | None = None
        self._head_timeout = head_timeout
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        uid = self._peer_of(transport)
        if uid == GONE or not self._limiter.admit(uid):
            transport.close()  # nothing was written: it closes at once
            return
        self._uid = uid
        super().connection_made(transport)
        self._head_timer = asyncio.get_running_loop().call_later(
            self._head_timeout, self._head_too_slow
        )

    @property
    def counted_as(self) -> Peer | None:
        """Whom the connection is counted against (None once closed): the dashboard's rate
        limit keeps one bucket per such client."""
        return self._uid

    def _peer_of(self, transport: asyncio.BaseTransport) -> Peer:
        """What the connection counts against: its uid, or for a TCP port the owner of its
        other end where this host's kernel names one (`api/tcp_peers.py`)."""
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in _TCP_FAMILIES:
            return tcp_peer_key(transport)
        try:
            self.peer_generation = identity_generation()
            self.peer = peer_caller(sock)
            return self.peer.uid
        except (GpuallocError, OSError):
            return -1  # unknown callers share one count

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None and self._request_count > 0:
            self._head_timer.cancel()
            self._head_timer = None

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._uid is None:
            return  # refused: aiohttp never knew of it
        self._limiter.release(self._uid)
        self._uid = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._request_count == 0 and self.transport is not None:
            self.transport.abort()

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        error: GpuallocError = (
            InternalError("the daemon failed to serve this request")
            if status >= 500
            else MalformedHttp(f"malformed HTTP request: {message or status}")
        )
        response = web.json_response(error.to_envelope(), status=status)
        response.force_close()
        return response


def limited_handlers(
    server: web.Server, *, limiter: ConnectionLimiter, head_timeout: float
) -> Callable[[], asyncio.Protocol]:
    """Connection handlers for another listener of `server` (the metrics port) under the
    API's rules: counted per peer and in all with `limiter`, closed when their first
    request's head is late or when idle past a minute."""

    def handler() -> asyncio.Protocol:
        return _EnvelopeRequestHandler(
            server,
            loop=asyncio.get_running_loop(),
            limiter=limiter,
            head_timeout=head_timeout,
            **_TCP_HANDLER_OPTIONS,
        )

    return handler


class UnixApiServer:
    """The aiohttp application served on an already bound Unix socket."""

    def __init__(
        self,
        app: web.Application,
        sock: socket.socket,
        *,
        grace_seconds: float,
        limiter: ConnectionLimiter,
        head_timeout: float,
    ) -> None:
        """The grace, connection limits and head timeout come from the daemon's settings
        (`daemon/config/settings.py`), which alone hold their defaults."""
        self._runner = web.AppRunner(app, shutdown_timeout=grace_seconds, **_RUNNER_OPTIONS)
        self._sock = sock
        self._server: asyncio.AbstractServer | None = None
        self._limiter = limiter
        self._head_timeout = head_timeout

    def _protocol(self) -> RequestHandler:
        server = self._runner.server
        assert server is not None
        return _EnvelopeRequestHandler(
            server,
            loop=asyncio.get_running_loop(),
            limiter=self._limiter,
            head_timeout=self._head_timeout,
            **_HANDLER_OPTIONS,
        )

    async def start(self) -> None:
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        if sys.version_info >= (3, 13):
            # 3.13 removes a Unix server's socket file when it closes; which file goes is the
            # daemon's call (a socket systemd made stays, a replaced one is left alone).
            self._server = await loop.create_unix_server(
                self._protocol, sock=self._sock, backlog=LISTEN_BACKLOG, cleanup_socket=False
            )
        else:
            self._server = await loop.create_unix_server(
                self._protocol, sock=self._sock, backlog=LISTEN_BACKLOG
            )

    async def stop(self, grace_seconds: float = 1.0) -> None:
        """Stop accepting, let requests in flight finish (within the grace), close the rest."""
        if self._server is None:
            self._sock.close()  # never served: the listening socket is still ours
            await self._runner.cleanup()
            return
        self._server.close()
        await self._runner.shutdown()
        await self._runner.cleanup()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), grace_seconds)
