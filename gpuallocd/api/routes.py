"""The routes of `/v1`: each reads the caller and the body, makes one call into the
allocator's façade and answers with JSON. Errors leave through the envelope middleware."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from aiohttp import web
from gpulease.sizes import MAX_POWER_LIMIT_WATTS

from gpuallocd import __version__
from gpuallocd.allocator import AllocateSpec, GpuStatus
from gpuallocd.allocator.crash_points import crash_point
from gpuallocd.api.admin_routes import admin_routes
from gpuallocd.api.context import ApiContext, context_of
from gpuallocd.api.enforcement_routes import enforcement_routes, unleased_on
from gpuallocd.api.ledger_routes import ledger_routes
from gpuallocd.api.notice_routes import notice_routes
from gpuallocd.api.peercred import user_name
from gpuallocd.api.preemption_routes import PREEMPT_FIELDS, preempt_fields, preemption_routes
from gpuallocd.api.requests import caller_of, facade_of, query_limit, read_body
from gpuallocd.api.reservation_routes import reservation_routes
from gpuallocd.api.validation import Body
from gpuallocd.errors import InvalidRequest, PermissionDenied
from gpuallocd.model import HistoryEvent, Lease
from gpuallocd.policies import available_policies
from gpuallocd.policies.rules import requested_count
from gpuallocd.topology import topology_to_json

__all__ = ["ALLOCATE_FIELDS", "routes"]

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
        "memory_bytes",
        "mig_profile",
        "request_id",
        "on_revoke",
        "power_limit_watts",
        *PREEMPT_FIELDS,
        "follow_work",
    }
)
ON_REVOKE_CHOICES = ("notify", "terminate")
MAX_HISTORY_LIMIT = 10_000
MAX_EVENTS_WAIT_SECONDS = 300
MAX_PROFILE_LENGTH = 64
MAX_REQUEST_ID_LENGTH = 100


def _lease_json(request: web.Request, lease: Lease) -> dict[str, Any]:
    data = lease.to_json()
    data["processes"] = facade_of(request).processes_of(lease.id) if lease.active else []
    data["unleased_use"] = unleased_on(request, set(lease.uuids)) if lease.active else []
    if lease.preemptible is not None:  # its preemption under way, its last checkpoint
        data.update(facade_of(request).preemption.of(lease.id) or {})
    return data


def _gpu_json(request: web.Request, status: GpuStatus) -> dict[str, Any]:
    """A GPU as `status` shows it; a preemptible holder's lease says so, and its preemption
    under way (docs/preemption.md)."""
    data = status.to_json() | {"unleased": unleased_on(request, {status.gpu.uuid})}
    return data | facade_of(request).preemption.marks(status.lease)


def _event_json(event: HistoryEvent) -> dict[str, Any]:
    return event.to_json(user_name(event.actor_uid))


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


async def health(request: web.Request) -> web.Response:
    ctx: ApiContext = context_of(request)
    return _json(
        {
            "status": "ok",
            "version": __version__,
            "started_at": ctx.started_at,
            "process_tracking": ctx.facade.process_tracking(),
            "ports": ctx.ports(),
            "driver": ctx.driver(),
            **ctx.config_report(),
        }
    )


async def get_diagnostics(request: web.Request) -> web.Response:
    """What `gpuallocctl doctor` checks on the daemon's side; read off the event loop (it
    reads /proc and /sys)."""
    caller_of(request)
    ctx = context_of(request)
    found = await asyncio.get_running_loop().run_in_executor(None, ctx.diagnostics)
    owed = await ctx.facade.pending_cleanups()
    channels = await ctx.facade.notices.failing()
    extra = {"driver": ctx.driver(), "pending_cleanups": owed, "notify_channels": channels}
    return _json({**found, **ctx.config_report(), **extra})


async def list_gpus(request: web.Request) -> web.Response:
    caller_of(request)
    statuses = await facade_of(request).gpus.gpu_status()
    read = facade_of(request).power.gpu_power()  # the last reading's: no driver call
    gpus = [{**_gpu_json(request, s), "power": read.get(s.gpu.uuid)} for s in statuses]
    power = await facade_of(request).power.status()
    tracking = facade_of(request).process_tracking()
    return _json({"gpus": gpus, "process_tracking": tracking, "power": power})


async def list_leases(request: web.Request) -> web.Response:
    caller_of(request)
    leases = await facade_of(request).leases()
    return _json({"leases": [_lease_json(request, lease) for lease in leases]})


def _allocate_spec(body: Body) -> AllocateSpec:
    spec = AllocateSpec(
        count=body.integer("count", minimum=1),
        gpus=body.gpu_refs("gpus"),
        policy=body.text("policy"),
        ttl_seconds=body.seconds("ttl_seconds"),
        label=body.text("label"),
        min_free_memory_bytes=body.integer("min_free_memory_bytes", minimum=0),
        bind_to_process=bool(body.boolean("bind_to_process")),
        memory_bytes=body.integer("memory_bytes", minimum=1),
        mig_profile=body.text("mig_profile", max_length=MAX_PROFILE_LENGTH),
        request_id=body.text("request_id", max_length=MAX_REQUEST_ID_LENGTH),
        on_revoke=body.choice("on_revoke", ON_REVOKE_CHOICES) or "notify",
        power_limit_watts=body.integer("power_limit_watts", minimum=1),
        **preempt_fields(body),
        follow_work=bool(body.boolean("follow_work")),
    )
    if spec.follow_work and not spec.bind_to_process:
        raise InvalidRequest(
            "follow_work needs bind_to_process: a lease that is not bound has no holder whose "
            "work it could follow",
            field="follow_work",
        )
    if (spec.power_limit_watts or 0) > MAX_POWER_LIMIT_WATTS:
        raise InvalidRequest(
            f"power_limit_watts may be at most {MAX_POWER_LIMIT_WATTS}", field="power_limit_watts"
        )
    count = requested_count(spec.count, spec.gpus, spec.memory_bytes, spec.mig_profile)
    return replace(spec, count=count)


async def allocate(request: web.Request) -> web.StreamResponse:
    caller = caller_of(request)
    body = await read_body(request, ALLOCATE_FIELDS)
    spec = _allocate_spec(body)  # resolved at the grant (allocator/site/request_bounds.py)
    wait = bool(body.boolean("wait"))
    timeout = body.seconds("wait_timeout_seconds")
    lease = await facade_of(request).allocate(caller, spec, wait=wait, timeout=timeout)
    return await _deliver(request, lease)


async def preview_lease(request: web.Request) -> web.Response:
    """What allocate would do with the same body now, writing nothing: the grant's own
    checks (allocator/queue/preview.py). A body allocate would refuse as malformed is refused
    here the same way; what the grant would refuse is the answer's `refusal`."""
    caller = caller_of(request)
    body = await read_body(request, ALLOCATE_FIELDS)
    spec = _allocate_spec(body)
    wait = bool(body.boolean("wait"))
    body.seconds("wait_timeout_seconds")  # checked as allocate checks it
    found = await facade_of(request).preview(caller, spec, wait=wait)
    return _json(found.to_json())


async def _deliver(request: web.Request, lease: Lease) -> web.StreamResponse:
    """Send the new lease, or withdraw it when it cannot reach its client."""
    response = _json(_lease_json(request, lease), status=201)
    crash_point("after-commit")  # tests only (allocator/crash_points.py)
    try:
        if request.transport is None or request.transport.is_closing():
            raise ConnectionResetError("the client left before its answer")
        await response.prepare(request)
        await response.write_eof()
        crash_point("after-reply")
    except (ConnectionError, asyncio.CancelledError):
        facade_of(request).withdraw(lease)
        raise
    return response


async def get_lease(request: web.Request) -> web.Response:
    caller_of(request)
    facade = facade_of(request)
    lease = await facade.lease(request.match_info["lease_id"])
    return _json({**_lease_json(request, lease), **await facade.preemption.detail(lease)})


def _query_number(request: web.Request, key: str, maximum: int) -> int:
    """A query parameter of ASCII digits from 0 to `maximum` (0 when absent)."""
    text = request.query.get(key, "0")
    if not (text.isascii() and text.isdigit()) or int(text) > maximum:
        raise InvalidRequest(f"{key} must be an integer from 0 to {maximum}", field=key)
    return int(text)


async def lease_events(request: web.Request) -> web.Response:
    """The lease and its history events after `after`; with `wait_seconds`, a long poll
    that answers at the next event (how `gpuallocctl run` hears a revoke at once)."""
    caller_of(request)
    after = _query_number(request, "after", 2**63 - 1)
    wait = _query_number(request, "wait_seconds", MAX_EVENTS_WAIT_SECONDS)
    facade = facade_of(request)
    lease, events = await facade.lease_events(request.match_info["lease_id"], after, wait)
    return _json(
        {
            "lease": _lease_json(request, lease),
            "events": [_event_json(event) for event in events],
            "revoke_grace_seconds": facade.revoke_grace_seconds,
        }
    )


async def renew_lease(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await read_body(request, frozenset({"ttl_seconds"}))
    lease = await facade_of(request).renew(
        caller, request.match_info["lease_id"], body.seconds("ttl_seconds")
    )
    answer = lease.to_json()
    idle = facade_of(request).idle_notice(lease.id)
    if idle is not None:  # idle reclaim: the holder learns it may lose the lease
        answer["idle"] = idle
    answer["unhealthy"] = facade_of(request).health.unhealthy(lease)
    return _json(answer)


async def join_lease(request: web.Request) -> web.Response:
    """The caller's process joins a bound lease of its own (`gpuallocctl run --lease`)."""
    caller = caller_of(request)
    await read_body(request, frozenset())
    lease = await facade_of(request).join(caller, request.match_info["lease_id"])
    return _json(_lease_json(request, lease))


async def free_lease(request: web.Request) -> web.Response:
    caller = caller_of(request)
    lease = await facade_of(request).free(caller, request.match_info["lease_id"])
    return _json(lease.to_json())


async def revoke_lease(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await read_body(request, frozenset({"reason"}))
    lease = await facade_of(request).revoke(
        caller, request.match_info["lease_id"], body.text("reason")
    )
    return _json(lease.to_json())


async def history(request: web.Request) -> web.Response:
    caller_of(request)
    limit = query_limit(request, MAX_HISTORY_LIMIT)
    lease_id = request.query.get("lease")
    facade = facade_of(request)
    events = await facade.accounting.history_json(lease_id, limit, user_name)
    reservations = [] if lease_id else await facade.scheduling.reservation_events(limit)
    tail = json.dumps(reservations).encode()
    body = b'{"events": %s, "reservation_events": %s}' % (events, tail)
    return web.Response(body=body, content_type="application/json")


async def get_topology(request: web.Request) -> web.Response:
    caller_of(request)
    return _json(topology_to_json(facade_of(request).topology))


async def rescan(request: web.Request) -> web.Response:
    if not caller_of(request).is_root:
        raise PermissionDenied("only root may rescan the node")
    ctx = context_of(request)
    # Discovery may take seconds on a real node: off the event loop, then adopted in order.
    topology = await ctx.discover()
    return _json(topology_to_json(await ctx.facade.gpus.adopt_topology(topology)))


async def release_gpu(request: web.Request) -> web.Response:
    caller = caller_of(request)
    ref: str | int = request.match_info["gpu"]
    status = await facade_of(request).gpus.release_gpu(caller, ref)
    return _json(status.to_json())


async def list_queue(request: web.Request) -> web.Response:
    caller_of(request)
    facade = facade_of(request)
    waiters, reservations = await facade.waiters(), await facade.scheduling.reservations()
    return _json(
        {"order": facade.scheduling.queue_order, "waiters": waiters, "reservations": reservations}
    )


async def list_policies(request: web.Request) -> web.Response:
    """The policies installed, and the one a request that names none gets."""
    caller_of(request)
    return _json({"policies": available_policies(), "default": facade_of(request).default_policy})


def routes() -> list[web.RouteDef]:
    return [
        web.get("/v1/health", health),
        web.get("/v1/diagnostics", get_diagnostics),
        web.get("/v1/gpus", list_gpus),
        web.get("/v1/leases", list_leases),
        web.post("/v1/leases", allocate),
        web.post("/v1/leases/preview", preview_lease),
        web.get("/v1/leases/{lease_id}", get_lease),
        web.delete("/v1/leases/{lease_id}", free_lease),
        web.post("/v1/leases/{lease_id}/renew", renew_lease),
        web.post("/v1/leases/{lease_id}/join", join_lease),
        web.get("/v1/leases/{lease_id}/events", lease_events),
        web.post("/v1/leases/{lease_id}/revoke", revoke_lease),
        web.get("/v1/history", history),
        web.get("/v1/topology", get_topology),
        web.post("/v1/rescan", rescan),
        web.get("/v1/policies", list_policies),
        web.get("/v1/queue", list_queue),
        *admin_routes(),
        *reservation_routes(),
        *enforcement_routes(),
        *ledger_routes(),
        *notice_routes(),
        *preemption_routes(_lease_json),
        web.post("/v1/gpus/{gpu}/release", release_gpu),
    ]
