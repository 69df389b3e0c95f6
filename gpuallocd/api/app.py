"""The HTTP application: the `/v1` routes behind one error envelope.

Every error leaves as the JSON envelope of `errors.py` with a stable code, including
aiohttp's own (unknown route, wrong method, body too large).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from gpuallocd.api.context import CONTEXT, ApiContext
from gpuallocd.api.routes import routes
from gpuallocd.errors import (
    BodyTooLarge,
    GpuallocError,
    InternalError,
    InvalidRequest,
    MethodNotAllowed,
    UnknownRoute,
)

__all__ = ["ApiContext", "create_app", "error_response"]

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DEFAULT_MAX_BODY_BYTES = 64 * 1024


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


def create_app(ctx: ApiContext, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> web.Application:
    app = web.Application(middlewares=[envelope_middleware], client_max_size=max_body_bytes)
    app[CONTEXT] = ctx
    app.add_routes(routes())
    return app
