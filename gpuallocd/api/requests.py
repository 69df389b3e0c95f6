"""What every route reads from its request, read one way: the caller (from the kernel, once
per connection), the façade, a JSON body within the body timeout, and a `limit` query."""

from __future__ import annotations

import asyncio

from aiohttp import web

from gpuallocd.allocator import AllocatorFacade
from gpuallocd.api.context import context_of
from gpuallocd.api.peercred import connection_caller
from gpuallocd.api.validation import Body, parse_json_object
from gpuallocd.errors import InvalidRequest
from gpuallocd.model import Caller

__all__ = ["caller_of", "facade_of", "query_limit", "read_body"]


def caller_of(request: web.Request) -> Caller:
    return connection_caller(request.protocol, request.transport)


def facade_of(request: web.Request) -> AllocatorFacade:
    return context_of(request).facade


async def read_body(request: web.Request, allowed: frozenset[str]) -> Body:
    """The JSON object of the body (unknown fields refused), within the body timeout."""
    if request.content.is_eof():  # all of it is in (the usual case): nothing to wait for
        return Body(parse_json_object(await request.read()), allowed)
    timeout = context_of(request).body_timeout_seconds
    try:
        raw = await asyncio.wait_for(request.read(), timeout)
    except asyncio.TimeoutError:
        raise InvalidRequest(f"the request body did not arrive within {timeout:g} s") from None
    return Body(parse_json_object(raw), allowed)


def query_limit(request: web.Request, maximum: int, default: int = 100) -> int:
    """The `limit` query parameter: ASCII digits from 1 to `maximum`."""
    text = request.query.get("limit", str(default))
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= maximum:
        raise InvalidRequest(f"limit must be an integer from 1 to {maximum}", field="limit")
    return int(text)
