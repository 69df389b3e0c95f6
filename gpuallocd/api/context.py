"""What the routes share: the allocator's façade, how to rediscover the node, the start time,
the daemon's diagnostics (for `gpuallocctl doctor`), its TCP ports' states (health) and the
GPU driver's state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from gpuallocd.allocator import AllocatorFacade
from gpuallocd.model import Caller, Topology
from gpuallocd.model.energy import EnergyPrice

__all__ = ["CONTEXT", "ApiContext", "LedgerAdmin", "context_of"]


class LedgerAdmin(Protocol):
    """The ledger's backups, for admins (daemon/ledger_care/backups.py)."""

    async def backup(self, caller: Caller) -> dict[str, Any]: ...

    async def verify(self, caller: Caller) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ApiContext:
    facade: AllocatorFacade
    discover: Callable[[], Awaitable[Topology]]  # off the event loop, with a deadline
    started_at: float
    body_timeout_seconds: float  # request_body_timeout_seconds (daemon/config/settings.py)
    diagnostics: Callable[[], dict[str, Any]] = dict  # the daemon's; empty where not given
    ports: Callable[[], list[dict[str, Any]]] = list  # metrics, dashboard: served or why not
    ledger_admin: LedgerAdmin | None = None  # backups; None where the daemon keeps none
    driver: Callable[[], dict[str, Any]] = dict  # the GPU driver's calls (driver_guard.py)
    # the config's warnings and a refused reload (daemon/config/machine_checks.py): health,
    # doctor
    config_report: Callable[[], dict[str, Any]] = dict
    energy_price: EnergyPrice | None = None  # energy_price_per_kwh and energy_currency


CONTEXT = web.AppKey("context", ApiContext)


def context_of(request: web.Request) -> ApiContext:
    return request.app[CONTEXT]
