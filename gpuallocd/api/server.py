"""Serving the API on a Unix socket: bind, set its mode, serve, and stop cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import grp
import os
import socket
import stat
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from gpuallocd.errors import (
    AlreadyRunning,
    ConfigError,
    GpuallocError,
    InternalError,
    MalformedHttp,
    StateUnusable,
)

__all__ = ["UnixApiServer", "bind_unix_socket"]

# Idle keep-alive connections stay open long enough for a client's renew interval; a client
# that hangs up cancels its request, so a disconnected waiter leaves the queue at once.
_HANDLER_OPTIONS: dict[str, Any] = {"access_log": None, "keepalive_timeout": 300.0}
_RUNNER_OPTIONS: dict[str, Any] = {**_HANDLER_OPTIONS, "handler_cancellation": True}


def _refuse_if_served(path: Path) -> None:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return  # a stale socket left by a daemon that died
    finally:
        probe.close()
    raise AlreadyRunning(f"another daemon is already serving on {path}")


def _group_id(name: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ConfigError(f"socket_group {name!r} is not a group on this machine") from None


def bind_unix_socket(path: Path, *, mode: int, group: str | None = None) -> socket.socket:
    """Bind and listen on `path`, then set its mode (and group) before accepting anyone."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StateUnusable(
            f"cannot create the socket's directory {path.parent}: {exc.strerror}"
        ) from exc
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise StateUnusable(f"{path} exists and is not a socket")
        _refuse_if_served(path)
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, mode)
        if group is not None:
            os.chown(path, -1, _group_id(group))
        sock.listen(512)
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
    leave as the JSON envelope too. `peer` keeps the caller of the connection."""

    __slots__ = ("peer",)

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


class UnixApiServer:
    """The aiohttp application served on an already bound Unix socket."""

    def __init__(
        self, app: web.Application, sock: socket.socket, *, grace_seconds: float = 5.0
    ) -> None:
        self._runner = web.AppRunner(app, shutdown_timeout=grace_seconds, **_RUNNER_OPTIONS)
        self._sock = sock
        self._server: asyncio.AbstractServer | None = None

    def _protocol(self) -> RequestHandler:
        server = self._runner.server
        assert server is not None
        return _EnvelopeRequestHandler(server, loop=asyncio.get_running_loop(), **_HANDLER_OPTIONS)

    async def start(self) -> None:
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(self._protocol, sock=self._sock)

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
