"""An aiohttp application on a TCP port (the metrics, the dashboard), served by the API's
connection handlers where the daemon gives them, so the port is under the socket's rules.

A port that cannot be bound (another program, or a user, listens there first) does not stop
the daemon: the API socket is what users need, so the failure is logged and kept in the
port's `PortState`, which `/v1/health` and `gpuallocctl doctor` show."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["Handlers", "PortState", "TcpSite", "port_report"]

log = logging.getLogger("gpuallocd")

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

    async def start(self, host: str, port: int, what: str, state: PortState) -> bool:
        """Listen; where the address cannot be bound, log why (naming `what`), keep it in
        `state` and return False: the daemon serves on without this port."""
        runner = web.AppRunner(self._app, access_log=None)
        await runner.setup()
        try:
            await self._bind(runner, host, port)
        except OSError as exc:
            await runner.cleanup()
            shown = f"[{host}]" if ":" in host else host
            state.error = f"cannot serve {what} on {shown}:{port}: {exc.strerror or exc}"
            log.error("%s; the API socket is served without it (docs/security.md)", state.error)
            return False
        state.error = None
        self._runner = runner
        return True

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _bind(self, runner: web.AppRunner, host: str, port: int) -> None:
        if self._handlers is None:
            await web.TCPSite(runner, host, port).start()
            return
        assert runner.server is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._handlers(runner.server), host, port)
