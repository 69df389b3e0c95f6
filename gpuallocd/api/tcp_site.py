"""An aiohttp application on a TCP port (the metrics, the dashboard), served by the API's
connection handlers where the daemon gives them, so the port is under the socket's rules."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from gpuallocd.errors import StateUnusable

__all__ = ["Handlers", "TcpSite", "unservable"]

# Makes the port's connection handlers from the application's server (`limited_handlers`).
Handlers = Callable[[web.Server], Callable[[], asyncio.Protocol]]


def unservable(what: str, host: str, port: int, exc: OSError) -> StateUnusable:
    """The refusal of an address that cannot be bound (here, and before start-up writes)."""
    return StateUnusable(f"cannot serve {what} on {host}:{port}: {exc.strerror or exc}")


class TcpSite:
    """`app` on HOST:PORT; aiohttp's own handlers where `handlers` is None."""

    def __init__(self, app: web.Application, handlers: Handlers | None) -> None:
        self._app = app
        self._handlers = handlers
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int, what: str) -> None:
        """Listen; StateUnusable (naming `what`) when the address cannot be bound."""
        runner = web.AppRunner(self._app, access_log=None)
        await runner.setup()
        try:
            await self._bind(runner, host, port)
        except OSError as exc:
            await runner.cleanup()
            raise unservable(what, host, port, exc) from exc
        self._runner = runner

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
