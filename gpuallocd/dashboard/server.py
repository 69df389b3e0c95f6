"""The dashboard's HTTP server: a read-only aiohttp site on `dashboard_listen`.

Nothing runs for the dashboard while nobody looks: no task, no cache, no sampling. A request
reads the node through the façade (the allocator's in-memory view, as `status` does), then
reads the ledger and renders on one thread of the dashboard's own, on a connection of its own,
so a page load never holds the event loop or the allocator's ledger connection for longer than
the in-memory read. Loads beyond a few at a time are answered 503 rather than queued.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import TypeVar

from aiohttp import hdrs, web

from gpuallocd.allocator import AllocatorFacade
from gpuallocd.api.peercred import user_name
from gpuallocd.api.tcp_address import parse_host_port
from gpuallocd.api.tcp_site import Handlers, PortState, TcpSite
from gpuallocd.dashboard.admission import BUSY, FairAdmission
from gpuallocd.dashboard.render import Renderer
from gpuallocd.dashboard.source import NodeNow, read_node
from gpuallocd.errors import GpuallocError
from gpuallocd.ledger.reader import LedgerReader
from gpuallocd.model.energy import EnergyPrice

__all__ = ["DashboardServer"]

log = logging.getLogger(__name__)

T = TypeVar("T")
READ_METHODS = frozenset({hdrs.METH_GET, hdrs.METH_HEAD})
MAX_IN_FLIGHT = 4
MAX_IN_FLIGHT_PER_CLIENT = 2
# Pages and parts served per second, all clients together (a browser polls one every 2 s):
# a script loading the page in a loop gets 429 past this, so the dashboard never takes more
# than a small, fixed share of the daemon's time. One client (a uid, else an address) gets
# a quarter of it: a loop of one client never empties the shared bucket alone.
MAX_PER_SECOND = 20.0
MAX_PER_SECOND_PER_CLIENT = 5.0
STATIC = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@web.middleware
async def _read_only(
    request: web.Request, handler: Callable[..., Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every method but GET and HEAD is refused before routing: the dashboard takes no writes."""
    if request.method not in READ_METHODS:
        raise web.HTTPMethodNotAllowed(request.method, sorted(READ_METHODS), headers=HEADERS)
    response = await handler(request)
    response.headers.update(HEADERS)
    return response


def _client_of(request: web.Request) -> Hashable:
    """Whose share a load counts against: the uid (or address) its connection is counted
    under (`api/tcp_peers.py`), else the peer's address."""
    counted = getattr(request.protocol, "counted_as", None)
    return counted if counted is not None else f"tcp {request.remote}"


class DashboardServer:
    """`/` (the page), `/api/live` and `/api/charts` (its parts as JSON), `/static/*`."""

    def __init__(
        self,
        facade: AllocatorFacade,
        ledger_path: Path,
        clock: Callable[[], float],
        *,
        listen: str | None,
        handlers: Handlers | None = None,
        energy_price: EnergyPrice | None = None,
    ) -> None:
        """ConfigError at once when `listen` is not a HOST:PORT the dashboard may use; with
        no `listen`, start and stop do nothing. `handlers` makes the port's connection
        handlers (the daemon gives the API's: counted per peer and in the descriptor budget,
        closed when idle); aiohttp's own by default. `energy_price`: the site's price of a kWh,
        for the cost beside each user's kWh."""
        self._handlers = handlers
        self._address = (
            parse_host_port(listen, "dashboard_listen", allow_wildcard=False) if listen else None
        )
        self._facade = facade
        self._clock = clock
        self._reader = LedgerReader(ledger_path)
        self._renderer = Renderer(self._reader, user_name, energy_price)
        # One thread, started at the first page load; its reads never meet the allocator's.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dashboard")
        self._admission = FairAdmission(
            rate=MAX_PER_SECOND,
            per_client_rate=MAX_PER_SECOND_PER_CLIENT,
            in_flight=MAX_IN_FLIGHT,
            per_client_in_flight=MAX_IN_FLIGHT_PER_CLIENT,
            clock=time.monotonic,
        )
        self._site: TcpSite | None = None
        self.port = PortState("dashboard", listen) if listen else None

    async def start(self) -> None:
        """Listen; an address that cannot be bound is logged and kept in `port`."""
        if self._address is None or self.port is None:
            return
        host, port = self._address
        app = web.Application(middlewares=[_read_only])
        app.router.add_get("/", self._page)
        app.router.add_get("/api/live", self._live)
        app.router.add_get("/api/charts", self._charts)
        app.router.add_get("/static/{name}", self._static)
        self._site = TcpSite(app, self._handlers)
        if not await self._site.start(host, port, "the dashboard", self.port):
            return
        shown = f"[{host}]" if ":" in host else host
        log.info("dashboard on http://%s:%d/", shown, port)

    async def stop(self) -> None:
        if self._site is not None:
            await self._site.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._reader.close()

    async def _page(self, request: web.Request) -> web.Response:
        page = await self._render(request, self._renderer.page)
        return web.Response(text=page, content_type="text/html", charset="utf-8")

    async def _live(self, request: web.Request) -> web.Response:
        return web.json_response(await self._render(request, self._renderer.live))

    async def _charts(self, request: web.Request) -> web.Response:
        return web.json_response(await self._render(request, self._renderer.charts))

    def _admit(self, client: Hashable) -> None:
        """503 past MAX_IN_FLIGHT (or the client's share) at once, 429 past the client's
        or everyone's requests a second."""
        refused = self._admission.admit(client)
        if refused == BUSY:
            raise web.HTTPServiceUnavailable(text="the dashboard is busy; try again\n")
        if refused is not None:
            raise web.HTTPTooManyRequests(
                text="the dashboard answers a few pages a second; try again\n",
                headers={"Retry-After": "1"},
            )

    async def _render(self, request: web.Request, render: Callable[[NodeNow], T]) -> T:
        client = _client_of(request)
        self._admit(client)
        try:
            node = await read_node(self._facade, self._clock)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, render, node)
        except GpuallocError as exc:
            raise web.HTTPServiceUnavailable(text=f"cannot read the node: {exc.message}\n") from exc
        finally:
            self._admission.done(client)

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        body = resources.files(__package__).joinpath("static").joinpath(name).read_bytes()
        return web.Response(body=body, content_type=STATIC[name], charset="utf-8")
