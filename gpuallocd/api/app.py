"""The HTTP API: routes of `/v1`, each a thin translation to one allocator call.

Every handler reads the caller from the kernel, validates the body, runs the allocator on
the single writer thread and answers with JSON. Errors leave as one envelope (errors.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gpuallocd import __version__
from gpuallocd.api.peercred import peer_caller
from gpuallocd.api.validation import Body, parse_json_object
from gpuallocd.errors import (
    BodyTooLarge,
    GpuallocError,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    PermissionDenied,
    UnknownRoute,
)
from gpuallocd.leases import Caller
from gpuallocd.liveness import ProcessWatcher
from gpuallocd.model import Topology
from gpuallocd.policies import available_policies
from gpuallocd.service import AllocateSpec, Allocator
from gpuallocd.topology import topology_to_json
from gpuallocd.waitqueue import WaitQueue
from gpuallocd.writer import SerialWorker

__all__ = ["ApiContext", "create_app", "error_response"]

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ALLOCATE_FIELDS = frozenset(
    {
        "count",
        "gpus",
        "policy",
        "ttl_seconds",
        "label",
        "min_free_memory_bytes",
        "wait",
        "bind_to_process",
        "wait_timeout_seconds",
    }
)
DEFAULT_MAX_BODY_BYTES = 64 * 1024


class ApiContext:
    """What the handlers need: the allocator, its writer, the queue, the process watcher, and
    how to rediscover the node."""

    def __init__(
        self,
        allocator: Allocator,
        worker: SerialWorker,
        queue: WaitQueue,
        watcher: ProcessWatcher,
        discover: Callable[[], Topology],
        started_at: float,
    ) -> None:
        self.allocator = allocator
        self.worker = worker
        self.queue = queue
        self.watcher = watcher
        self.discover = discover
        self.started_at = started_at


def error_response(exc: GpuallocError) -> web.Response:
    return web.json_response(exc.to_envelope(), status=exc.http_status)


def _translate_http_error(exc: web.HTTPException) -> GpuallocError:
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return BodyTooLarge("the request body is too large")
    if isinstance(exc, web.HTTPNotFound):
        return UnknownRoute("no such path in the API")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return MethodNotAllowed(
            f"method not allowed; allowed: {', '.join(sorted(exc.allowed_methods))}"
        )
    return InvalidRequest(exc.reason)


@web.middleware
async def envelope_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves as the JSON envelope with a stable code."""
    try:
        return await handler(request)
    except GpuallocError as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(_translate_http_error(exc))
    except Exception:
        log.exception("unexpected error serving %s %s", request.method, request.path)
        return error_response(InternalError("the daemon failed to serve this request"))


def _ctx(request: web.Request) -> ApiContext:
    ctx: ApiContext = request.app[CONTEXT]
    return ctx


def _caller(request: web.Request) -> Caller:
    transport = request.transport
    return peer_caller(transport.get_extra_info("socket") if transport else None)


async def _body(request: web.Request, allowed: frozenset[str]) -> Body:
    return Body(parse_json_object(await request.read()), allowed)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


# Handlers ---------------------------------------------------------------------------------


async def health(request: web.Request) -> web.Response:
    ctx = _ctx(request)
    return _json({"status": "ok", "version": __version__, "started_at": ctx.started_at})


async def list_gpus(request: web.Request) -> web.Response:
    _caller(request)
    ctx = _ctx(request)
    statuses = await ctx.worker.run(ctx.allocator.gpu_status)
    return _json({"gpus": [s.to_json() for s in statuses]})


async def list_leases(request: web.Request) -> web.Response:
    _caller(request)
    ctx = _ctx(request)
    leases = await ctx.worker.run(ctx.allocator.leases)
    return _json({"leases": [lease.to_json() for lease in leases]})


async def allocate(request: web.Request) -> web.Response:
    caller = _caller(request)
    body = await _body(request, ALLOCATE_FIELDS)
    spec = AllocateSpec(
        count=body.integer("count", minimum=1),
        gpus=body.gpu_refs("gpus"),
        policy=body.text("policy"),
        ttl_seconds=body.seconds("ttl_seconds"),
        label=body.text("label"),
        min_free_memory_bytes=body.integer("min_free_memory_bytes", minimum=0),
        bind_to_process=bool(body.boolean("bind_to_process")),
    )
    if spec.count is None and not spec.gpus:
        raise InvalidRequest("give a count, or the GPUs to lease")
    wait = bool(body.boolean("wait"))
    timeout = body.seconds("wait_timeout_seconds")
    ctx = _ctx(request)
    lease = await ctx.queue.allocate(caller, spec, wait=wait, timeout=timeout)
    ctx.watcher.watch(lease)
    return _json(lease.to_json(), status=201)


async def get_lease(request: web.Request) -> web.Response:
    _caller(request)
    ctx = _ctx(request)
    lease = await ctx.worker.run(ctx.allocator.lease, request.match_info["lease_id"])
    return _json(lease.to_json())


async def renew_lease(request: web.Request) -> web.Response:
    caller = _caller(request)
    body = await _body(request, frozenset({"ttl_seconds"}))
    ctx = _ctx(request)
    lease = await ctx.worker.run(
        ctx.allocator.renew, caller, request.match_info["lease_id"], body.seconds("ttl_seconds")
    )
    return _json(lease.to_json())


async def free_lease(request: web.Request) -> web.Response:
    caller = _caller(request)
    ctx = _ctx(request)
    lease = await ctx.worker.run(ctx.allocator.free, caller, request.match_info["lease_id"])
    ctx.queue.kick()
    return _json(lease.to_json())


async def revoke_lease(request: web.Request) -> web.Response:
    caller = _caller(request)
    body = await _body(request, frozenset({"reason"}))
    ctx = _ctx(request)
    lease = await ctx.worker.run(
        ctx.allocator.revoke, caller, request.match_info["lease_id"], body.text("reason")
    )
    ctx.queue.kick()
    return _json(lease.to_json())


async def history(request: web.Request) -> web.Response:
    _caller(request)
    lease_id = request.query.get("lease")
    limit_text = request.query.get("limit", "100")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= 10_000:
        raise InvalidRequest("limit must be an integer from 1 to 10000")
    ctx = _ctx(request)
    events = await ctx.worker.run(ctx.allocator.history, lease_id, int(limit_text))
    return _json({"events": [e.to_json() for e in events]})


async def get_topology(request: web.Request) -> web.Response:
    _caller(request)
    return _json(topology_to_json(_ctx(request).allocator.topology))


async def rescan(request: web.Request) -> web.Response:
    if not _caller(request).is_root:
        raise PermissionDenied("only root may rescan the node")
    ctx = _ctx(request)
    # Discovery may take seconds on a real node: off the event loop, then adopted in order.
    topology = await asyncio.get_running_loop().run_in_executor(None, ctx.discover)
    await ctx.worker.run(ctx.allocator.set_topology, topology)
    ctx.queue.kick()
    return _json(topology_to_json(ctx.allocator.topology))


async def list_queue(request: web.Request) -> web.Response:
    _caller(request)
    return _json({"waiters": _ctx(request).queue.waiters()})


async def list_policies(request: web.Request) -> web.Response:
    _caller(request)
    return _json({"policies": available_policies()})


CONTEXT = web.AppKey("context", ApiContext)


def create_app(ctx: ApiContext, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> web.Application:
    app = web.Application(middlewares=[envelope_middleware], client_max_size=max_body_bytes)
    app[CONTEXT] = ctx
    app.add_routes(
        [
            web.get("/v1/health", health),
            web.get("/v1/gpus", list_gpus),
            web.get("/v1/leases", list_leases),
            web.post("/v1/leases", allocate),
            web.get("/v1/leases/{lease_id}", get_lease),
            web.delete("/v1/leases/{lease_id}", free_lease),
            web.post("/v1/leases/{lease_id}/renew", renew_lease),
            web.post("/v1/leases/{lease_id}/revoke", revoke_lease),
            web.get("/v1/history", history),
            web.get("/v1/topology", get_topology),
            web.post("/v1/rescan", rescan),
            web.get("/v1/policies", list_policies),
            web.get("/v1/queue", list_queue),
        ]
    )
    return app
