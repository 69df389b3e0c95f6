"""The routes of the notices' feed: each user reads their own (the caller's uid from the
kernel, never from the request; root may read everyone's), sets their own thresholds, and
reports their own channels' deliveries."""

from __future__ import annotations

from aiohttp import web

from gpuallocd.allocator.notices.desk import MAX_CHANNELS, MAX_FEED_LIMIT, MAX_THRESHOLDS
from gpuallocd.api.requests import caller_of, facade_of, query_limit, read_body
from gpuallocd.errors import InvalidRequest

__all__ = ["notice_routes"]

MAX_WAIT_SECONDS = 300
MAX_ERROR_LENGTH = 1000


def _number(request: web.Request, key: str, maximum: int) -> int:
    text = request.query.get(key, "0")
    if not (text.isascii() and text.isdigit()) or int(text) > maximum:
        raise InvalidRequest(f"{key} must be an integer from 0 to {maximum}", field=key)
    return int(text)


def _everyone(request: web.Request) -> bool:
    value = request.query.get("all", "0")
    if value not in ("0", "1"):
        raise InvalidRequest("all must be 0 or 1", field="all")
    return value == "1"


async def feed(request: web.Request) -> web.Response:
    """`?after=SEQ&wait_seconds=S&limit=N[&all=1]`: a long poll of the caller's notices."""
    caller = caller_of(request)
    after = _number(request, "after", 2**63 - 1)
    wait = _number(request, "wait_seconds", MAX_WAIT_SECONDS)
    limit = query_limit(request, MAX_FEED_LIMIT)
    notices = facade_of(request).notices
    answer = await notices.feed(caller, after, wait, limit, _everyone(request))
    return web.json_response(answer)


async def get_settings(request: web.Request) -> web.Response:
    return web.json_response(facade_of(request).notices.settings(caller_of(request)))


async def put_settings(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await read_body(request, frozenset({"thresholds_seconds"}))
    seconds = body.seconds_list("thresholds_seconds", max_items=MAX_THRESHOLDS)
    notices = facade_of(request).notices
    await notices.set_thresholds(caller, seconds)
    return web.json_response(notices.settings(caller))


async def report_delivery(request: web.Request) -> web.Response:
    caller = caller_of(request)
    body = await read_body(request, frozenset({"channel", "kind", "ok", "error"}))
    channel = body.text("channel", max_length=48) or ""
    kind = body.text("kind", max_length=16) or ""
    ok = body.boolean("ok")
    if ok is None:
        raise InvalidRequest("give ok: true or false", field="ok")
    error = body.text("error", max_length=MAX_ERROR_LENGTH)
    await facade_of(request).notices.report(caller, channel, kind, ok, error)
    return web.json_response({"channel": channel, "ok": ok}, status=201)


async def forget_channel(request: web.Request) -> web.Response:
    caller = caller_of(request)
    await facade_of(request).notices.forget_channel(caller, request.match_info["channel"])
    return web.json_response({"channel": request.match_info["channel"], "forgotten": True})


async def delivery_reports(request: web.Request) -> web.Response:
    caller = caller_of(request)
    reports = await facade_of(request).notices.reports(caller, _everyone(request))
    return web.json_response({"channels": reports, "max_channels": MAX_CHANNELS})


def notice_routes() -> list[web.RouteDef]:
    return [
        web.get("/v1/notifications", feed),
        web.get("/v1/notifications/settings", get_settings),
        web.put("/v1/notifications/settings", put_settings),
        web.get("/v1/notifications/deliveries", delivery_reports),
        web.post("/v1/notifications/deliveries", report_delivery),
        web.delete("/v1/notifications/deliveries/{channel}", forget_channel),
    ]
