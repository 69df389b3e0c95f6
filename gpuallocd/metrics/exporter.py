"""Serving the metrics: an HTTP endpoint on a TCP address and a textfile, both optional.

The endpoint is an aiohttp site on the daemon's own event loop, not prometheus-client's
HTTP server: that server answers from a thread of its own, and the node's state (GPU status,
leases, the queue) is read through the allocator's façade, which runs on the event loop and
takes no locks. A scrape here awaits that read like any API request, then renders.

The port's connections are made by `handlers` (the daemon gives the API's: each connection
counted per peer address and, with the API socket's, against the daemon's descriptor
budget; closed when its first request is late or it idles), so a flood of idle connections
to the metrics port takes nothing from the API's users.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import hdrs, web

from gpuallocd.api.tcp_address import parse_host_port
from gpuallocd.api.tcp_site import Handlers, PortState, TcpSite
from gpuallocd.errors import GpuallocError
from gpuallocd.metrics.instruments import DaemonMetrics
from gpuallocd.metrics.node import NodeSample
from gpuallocd.metrics.render import render_negotiated, render_text
from gpuallocd.metrics.textfile import write_atomically

__all__ = ["MetricsExporter"]

log = logging.getLogger(__name__)

Sampler = Callable[[], Awaitable[NodeSample]]


class MetricsExporter:
    """`/metrics` on `listen` (HOST:PORT) and/or `textfile` rewritten every `interval`."""

    def __init__(
        self,
        metrics: DaemonMetrics,
        sampler: Sampler,
        *,
        listen: str | None,
        textfile: str | None,
        interval_seconds: float,
        handlers: Handlers | None = None,
    ) -> None:
        """ConfigError at once when `listen` is not HOST:PORT. `handlers` makes the port's
        connection handlers from the application's server (aiohttp's own by default)."""
        self._metrics = metrics
        self._sampler = sampler
        self._address = (
            parse_host_port(listen, "metrics_listen", allow_wildcard=True) if listen else None
        )
        self._textfile = Path(textfile) if textfile else None
        self._interval = interval_seconds
        self._site: TcpSite | None = None
        self._handlers = handlers
        self._task: asyncio.Task[None] | None = None
        self.port = PortState("metrics", listen) if listen else None

    async def start(self) -> None:
        """Listen (an address that cannot be bound is logged and kept in `port`) and start
        the textfile."""
        if self._address is not None and self.port is not None:
            await self._listen(*self._address, self.port)
        if self._textfile is not None:
            self._task = asyncio.create_task(self._write_forever(self._textfile))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._site is not None:
            await self._site.stop()

    async def _listen(self, host: str, port: int, state: PortState) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._scrape)
        self._site = TcpSite(app, self._handlers)
        if not await self._site.start(host, port, "metrics", state):
            return
        log.info("metrics on http://%s/metrics", _url_host(host, port))

    async def _scrape(self, request: web.Request) -> web.Response:
        try:
            sample = await self._sampler()
        except GpuallocError as exc:
            return web.Response(status=503, text=f"cannot read the node: {exc.message}\n")
        accept = ",".join(request.headers.getall(hdrs.ACCEPT, []))
        body, content_type = render_negotiated(self._metrics, sample, accept)
        return web.Response(body=body, headers={hdrs.CONTENT_TYPE: content_type})

    async def _write_forever(self, path: Path) -> None:
        loop = asyncio.get_running_loop()
        failing = False
        while True:
            try:
                body = render_text(self._metrics, await self._sampler())
                await loop.run_in_executor(None, write_atomically, path, body)
                failing = False
            except (OSError, GpuallocError) as exc:
                if not failing:  # once per outage, not every interval
                    log.error("cannot write the metrics file %s: %s", path, exc)
                failing = True
            await asyncio.sleep(self._interval)


def _url_host(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
