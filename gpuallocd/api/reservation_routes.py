"""The routes of advance reservations (admins create and cancel; everyone reads)."""

from __future__ import annotations

from aiohttp import web

from gpuallocd.allocator.queue.advance import ReserveSpec
from gpuallocd.api.requests import caller_of, facade_of, read_body
from gpuallocd.api.validation import Body
from gpuallocd.errors import InvalidRequest

__all__ = ["reservation_routes"]

RESERVE_FIELDS = frozenset(
    {
        "count",
        "gpus",
        "start_at",
        "start_in_seconds",
        "duration_seconds",
        "user",
        "group",
        "reason",
        "policy",
    }
)
MAX_REASON_LENGTH = 500
MAX_NAME_LENGTH = 64


def _spec(body: Body) -> ReserveSpec:
    reason = (body.text("reason", max_length=MAX_REASON_LENGTH) or "").strip()
    if not reason:
        raise InvalidRequest("give the reason for the reservation", field="reason")
    duration = body.seconds("duration_seconds")
    if duration is None:
        raise InvalidRequest("give duration_seconds", field="duration_seconds")
    start_in = body.integer("start_in_seconds", minimum=0)
    start_at = body.seconds("start_at")
    if (start_in is None) == (start_at is None):
        raise InvalidRequest("give either start_at or start_in_seconds", field="start_at")
    return ReserveSpec(
        start_at=start_at,
        start_in_seconds=None if start_in is None else float(start_in),
        duration_seconds=duration,
        reason=reason,
        count=body.integer("count", minimum=1),
        gpus=body.gpu_refs("gpus"),
        user=body.text("user", max_length=MAX_NAME_LENGTH),
        group=body.text("group", max_length=MAX_NAME_LENGTH),
        policy=body.text("policy", max_length=MAX_NAME_LENGTH),
    )


async def create_reservation(request: web.Request) -> web.Response:
    caller = caller_of(request)
    spec = _spec(await read_body(request, RESERVE_FIELDS))
    made = await facade_of(request).scheduling.reserve(caller, spec)
    return web.json_response(made, status=201)


async def list_reservations(request: web.Request) -> web.Response:
    caller_of(request)
    ended = request.query.get("all") in ("1", "true")
    found = await facade_of(request).scheduling.reservations(ended=ended)
    return web.json_response({"reservations": found})


async def cancel_reservation(request: web.Request) -> web.Response:
    caller = caller_of(request)
    ended = await facade_of(request).scheduling.unreserve(
        caller, request.match_info["reservation_id"]
    )
    return web.json_response(ended)


def reservation_routes() -> list[web.RouteDef]:
    return [
        web.get("/v1/reservations", list_reservations),
        web.post("/v1/reservations", create_reservation),
        web.delete("/v1/reservations/{reservation_id}", cancel_reservation),
    ]
