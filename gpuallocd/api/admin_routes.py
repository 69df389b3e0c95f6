"""The routes of a shared node's rules: drain and undrain (admins), the limits that apply to
a user, accounting from the history, and the record of admin actions."""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from gpuallocd.allocator.queue.order import primary_group_of
from gpuallocd.allocator.site.limits import BUDGETS
from gpuallocd.api.context import context_of
from gpuallocd.api.peercred import caller_named
from gpuallocd.api.requests import caller_of, facade_of, query_limit, read_body
from gpuallocd.api.usage_view import for_user
from gpuallocd.api.validation import Body
from gpuallocd.errors import InvalidRequest
from gpuallocd.model import Caller, UserUsage
from gpuallocd.model.energy import JOULES_PER_KWH, EnergyPrice
from gpuallocd.model.usage import usage_by_group

__all__ = ["admin_routes"]

MAX_REASON_LENGTH = 500
MAX_ACTIONS_LIMIT = 10_000


LAST_CALENDAR_DAY = 253402214400.0  # 9999-12-31: past it, local days cannot be named


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
    body = await read_body(request, frozenset({"gpus", "reason"}))
    if not body.gpu_refs("gpus"):
        raise InvalidRequest("name the GPUs (UUIDs or indices)", field="gpus")
    if reason_required and not (body.text("reason", max_length=MAX_REASON_LENGTH) or "").strip():
        raise InvalidRequest("give the reason for the drain", field="reason")
    return body


async def drain(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await _drain_body(request, reason_required=True)
    reason = (body.text("reason", max_length=MAX_REASON_LENGTH) or "").strip()
    statuses = await facade_of(request).gpus.drain(caller, body.gpu_refs("gpus"), reason)
    return web.json_response({"gpus": [s.to_json() for s in statuses]})


async def undrain(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await _drain_body(request, reason_required=False)
    statuses = await facade_of(request).gpus.undrain(caller, body.gpu_refs("gpus"))
    return web.json_response({"gpus": [s.to_json() for s in statuses]})


async def limits(request: web.Request) -> web.Response:
    caller = caller_of(request)
    named = request.query.get("user")
    subject = caller if not named or named in (caller.user, str(caller.uid)) else None
    report = await facade_of(request).accounting.limits(subject or caller_named(named or ""))
    return web.json_response(report)


def priced(usage: UserUsage, price: EnergyPrice | None) -> dict[str, Any]:
    """The cost of a user's energy, leased and unleased, where the site set a price."""
    if price is None:
        return {}
    joules = usage.energy_joules + usage.unleased_energy_joules
    return {"energy_cost": price.cost(joules / JOULES_PER_KWH)}


async def _budgets(request: web.Request, caller: Caller) -> list[dict[str, Any]] | None:
    """With `user`: that user's budgets and what remains of each (as `limits` shows them)."""
    named = request.query.get("user")
    if not named:
        return None
    try:
        subject = caller if named in (caller.user, str(caller.uid)) else caller_named(named)
    except InvalidRequest:
        return None  # a user gone from this machine still has usage, no longer limits
    report = await facade_of(request).accounting.limits(subject)
    return [entry for entry in report["limits"] if entry["limit"] in BUDGETS]


async def usage(request: web.Request) -> web.Response:
    caller = caller_of(request)
    since = _query_time(request, "since") or 0.0
    until = _query_time(request, "until")
    facade = facade_of(request)
    user = request.query.get("user")
    end, users = await facade.accounting.usage(since, until, user)
    decayed = await facade.scheduling.fair_share_usage()
    reserved = await facade.scheduling.reserved_hours(since, end)
    shown, reserved = (decayed, reserved) if user is None else for_user(user, decayed, reserved)
    price = context_of(request).energy_price
    report: dict[str, Any] = {
        "since": since,
        "until": end,
        "users": [
            {**u.to_json(), "decayed_gpu_hours": decayed.get(u.user), **priced(u, price)}
            for u in users
        ],
        "groups": usage_by_group(users, primary_group_of),
        "energy_price": None if price is None else price.to_json(),
        "budgets": await _budgets(request, caller),
        "fair_share": shown,
        "reservations": reserved,
    }
    per = request.query.get("per")
    if per not in (None, "day"):
        raise InvalidRequest("per must be 'day'", field="per", value=per)
    if per == "day" and not end <= LAST_CALENDAR_DAY:
        raise InvalidRequest("until is past the calendar's last day for per=day", field="until")
    if per == "day":  # the charts' daily bars, in one read (docs/api.md)
        named = next((u.user for u in users if user in (u.user, str(u.uid))), user)
        days = await facade.accounting.usage_per_day(since, end, None if user is None else named)
        report["days"] = [{"start": start, "gpu_hours": hours} for start, hours in days]
    return web.json_response(report)


async def admin_actions(request: web.Request) -> web.Response:
    caller_of(request)
    actions = await facade_of(request).accounting.admin_actions(
        query_limit(request, MAX_ACTIONS_LIMIT)
    )
    return web.json_response({"actions": [a.to_json() for a in actions]})


def admin_routes() -> list[web.RouteDef]:
    return [
        web.post("/v1/drain", drain),
        web.post("/v1/undrain", undrain),
        web.get("/v1/limits", limits),
        web.get("/v1/usage", usage),
        web.get("/v1/admin-actions", admin_actions),
    ]
