"""The routes of a shared node's rules: drain and undrain (admins), the limits that apply to
a user, accounting from the history, and the record of admin actions."""

from __future__ import annotations

import math

from aiohttp import web

from gpuallocd.allocator import AllocatorFacade
from gpuallocd.api.context import context_of
from gpuallocd.api.peercred import caller_named, peer_caller
from gpuallocd.api.validation import Body, parse_json_object
from gpuallocd.errors import InvalidRequest
from gpuallocd.model import Caller

__all__ = ["admin_routes"]

MAX_REASON_LENGTH = 500
MAX_ACTIONS_LIMIT = 10_000


def _caller(request: web.Request) -> Caller:
    transport = request.transport
    return peer_caller(transport.get_extra_info("socket") if transport else None)


def _facade(request: web.Request) -> AllocatorFacade:
    return context_of(request).facade


def _query_time(request: web.Request, key: str) -> float | None:
    text = request.query.get(key)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise InvalidRequest(f"{key} must be a Unix time in seconds", field=key)
    return value


async def _drain_body(request: web.Request, *, reason_required: bool) -> Body:
    body = Body(parse_json_object(await request.read()), frozenset({"gpus", "reason"}))
    if not body.gpu_refs("gpus"):
        raise InvalidRequest("name the GPUs (UUIDs or indices)", field="gpus")
    if reason_required and not (body.text("reason", max_length=MAX_REASON_LENGTH) or "").strip():
        raise InvalidRequest("give the reason for the drain", field="reason")
    return body


async def drain(request: web.Request) -> web.Response:
    caller = _caller(request)
    body = await _drain_body(request, reason_required=True)
    reason = (body.text("reason", max_length=MAX_REASON_LENGTH) or "").strip()
    statuses = await _facade(request).drain(caller, body.gpu_refs("gpus"), reason)
    return web.json_response({"gpus": [s.to_json() for s in statuses]})


async def undrain(request: web.Request) -> web.Response:
    caller = _caller(request)
    body = await _drain_body(request, reason_required=False)
    statuses = await _facade(request).undrain(caller, body.gpu_refs("gpus"))
    return web.json_response({"gpus": [s.to_json() for s in statuses]})


async def limits(request: web.Request) -> web.Response:
    caller = _caller(request)
    named = request.query.get("user")
    subject = caller if not named or named in (caller.user, str(caller.uid)) else None
    report = await _facade(request).limits(subject or caller_named(named or ""))
    return web.json_response(report)


async def usage(request: web.Request) -> web.Response:
    _caller(request)
    since = _query_time(request, "since") or 0.0
    until = _query_time(request, "until")
    end, users = await _facade(request).usage(since, until, request.query.get("user"))
    return web.json_response({"since": since, "until": end, "users": [u.to_json() for u in users]})


async def admin_actions(request: web.Request) -> web.Response:
    _caller(request)
    text = request.query.get("limit", "100")
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_ACTIONS_LIMIT:
        raise InvalidRequest(
            f"limit must be an integer from 1 to {MAX_ACTIONS_LIMIT}", field="limit"
        )
    actions = await _facade(request).admin_actions(int(text))
    return web.json_response({"actions": [a.to_json() for a in actions]})


def admin_routes() -> list[web.RouteDef]:
    return [
        web.post("/v1/drain", drain),
        web.post("/v1/undrain", undrain),
        web.get("/v1/limits", limits),
        web.get("/v1/usage", usage),
        web.get("/v1/admin-actions", admin_actions),
    ]
