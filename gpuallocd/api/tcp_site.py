"""An aiohttp application on a TCP port (the metrics, the dashboard), served by the API's
connection handlers where the daemon gives them, so the port is under the socket's rules.

A port that cannot be bound (another program, or a user, listens there first) does not stop
the daemon: the API socket is what users need, so the failure is logged and kept in the
port's `PortState`, which `/v1/health` and `gpuallocctl doctor` show, and the bind is tried
again every `RETRY_SECONDS` until it succeeds (logged once more, then)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["Handlers", "PortState", "TcpSite", "port_report"]

log = logging.getLogger("gpuallocd")

RETRY_SECONDS = 10.0

# Makes the port's connection handlers from the application's server (`limited_handlers`).
Handlers = Callable[[web.Server], Callable[[], asyncio.Protocol]]


@dataclass
class PortState:
    """One TCP port of the daemon: `name` (metrics, dashboard), its address, and why it is
    not served (None while it is, or before it started)."""

    name: str
    listen: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "port": self.name,
            "listen": self.listen,
            "serving": self.error is None,
            "error": self.error,
        }


def port_report(*states: PortState | None) -> Callable[[], list[dict[str, Any]]]:
    """What health and doctor show of the ports that are configured (None: not)."""
    kept = [state for state in states if state is not None]
    return lambda: [state.to_json() for state in kept]


class TcpSite:
    """`app` on HOST:PORT; aiohttp's own handlers where `handlers` is None."""

    def __init__(self, app: web.Application, handlers: Handlers | None) -> None:
        self._app = app
        self._handlers = handlers
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None
        self._retry: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int, what: str, state: PortState) -> bool:
        """Listen; where the address cannot be bound, log why (naming `what`), keep it in
        `state`, try again in the background, and return False: the daemon serves on."""
        problem = await self._try(host, port, what)
        state.error = problem
        if problem is None:
            return True
        log.error("%s; the API socket is served without it (docs/security.md)", problem)
        self._retry = asyncio.create_task(self._retry_until_bound(host, port, what, state))
        return False

    async def stop(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            await asyncio.gather(self._retry, return_exceptions=True)
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _try(self, host: str, port: int, what: str) -> str | None:
        """Bind once; None, or why not."""
        runner = web.AppRunner(self._app, access_log=None)
        await runner.setup()
        try:
            await self._bind(runner, host, port)
        except OSError as exc:
            await runner.cleanup()
            shown = f"[{host}]" if ":" in host else host
            return f"cannot serve {what} on {shown}:{port}: {exc.strerror or exc}"
        self._runner = runner
        return None

    async def _retry_until_bound(self, host: str, port: int, what: str, state: PortState) -> None:
        while state.error is not None:
            await asyncio.sleep(RETRY_SECONDS)
            problem = await self._try(host, port, what)
            if problem is None:
                log.info("%s now served on port %d", what, port)
            state.error = problem  # what health and doctor show: the latest reason

    async def _bind(self, runner: web.AppRunner, host: str, port: int) -> None:
        if self._handlers is None:
            await web.TCPSite(runner, host, port).start()
            return
        assert runner.server is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._handlers(runner.server), host, port)
