"""The ledger's backups, for admins: take one now, check every one (`gpuallocctl ledger`)."""

from __future__ import annotations

from aiohttp import web

from gpuallocd.api.context import LedgerAdmin, context_of
from gpuallocd.api.requests import caller_of
from gpuallocd.errors import InternalError

__all__ = ["ledger_routes"]


def _admin(request: web.Request) -> LedgerAdmin:
    found = context_of(request).ledger_admin
    if found is None:
        raise InternalError("this daemon keeps no ledger backups")
    return found


async def backup(request: web.Request) -> web.Response:
    caller = caller_of(request)
    return web.json_response(await _admin(request).backup(caller), status=201)


async def verify(request: web.Request) -> web.Response:
    caller = caller_of(request)
    return web.json_response(await _admin(request).verify(caller))


def ledger_routes() -> list[web.RouteDef]:
    return [
        web.post("/v1/ledger/backups", backup),
        web.get("/v1/ledger/backups", verify),
    ]
