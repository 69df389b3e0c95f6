"""The routes of enforcement: `POST /v1/adopt` (a caller's own running work becomes their
lease) and `GET /v1/unleased` (processes using GPUs without a lease, and what was done)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gpuallocd.api.requests import caller_of, facade_of, query_limit, read_body
from gpuallocd.api.validation import Body
from gpuallocd.errors import InvalidRequest

__all__ = ["enforcement_routes", "unleased_on"]

MAX_UNLEASED_LIMIT = 10_000
MAX_UUID_LENGTH = 128


def unleased_on(request: web.Request, uuids: set[str]) -> list[dict[str, Any]]:
    """The processes that use these GPUs or MIG instances without a lease, at the last sample."""
    return [
        o
        for o in facade_of(request).unleased.offenders()
        if o["gpu_uuid"] in uuids or o["unit_uuid"] in uuids
    ]


def _gpu_ref(body: Body) -> str | int | None:
    """`gpu`: an index (a non-negative integer) or a GPU's or MIG instance's UUID."""
    try:
        return body.integer("gpu", minimum=0)
    except InvalidRequest:
        pass
    try:
        return body.text("gpu", max_length=MAX_UUID_LENGTH) or None
    except InvalidRequest:
        raise InvalidRequest("gpu must be a GPU UUID or index", field="gpu") from None


async def adopt(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await read_body(request, frozenset({"pid", "gpu"}))
    pid = body.integer("pid", minimum=1)
    leases = await facade_of(request).adopt(caller, pid, _gpu_ref(body))
    return web.json_response({"leases": [lease.to_json() for lease in leases]}, status=201)


async def unleased(request: web.Request) -> web.Response:
    caller_of(request)
    facade = facade_of(request)
    events = await facade.accounting.unleased_history(query_limit(request, MAX_UNLEASED_LIMIT))
    return web.json_response(
        {
            "mode": facade.unleased.rules.mode,
            "processes": facade.unleased.offenders(),
            "events": events,
        }
    )


def enforcement_routes() -> list[web.RouteDef]:
    return [web.post("/v1/adopt", adopt), web.get("/v1/unleased", unleased)]
