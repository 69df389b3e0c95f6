"""What the routes share: the allocator's façade, how to rediscover the node, the start time,
and the daemon's diagnostics (for `gpuallocctl doctor`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gpuallocd.allocator import AllocatorFacade
from gpuallocd.model import Topology
from gpuallocd.model.energy import EnergyPrice

__all__ = ["CONTEXT", "ApiContext", "context_of"]


@dataclass(frozen=True)
class ApiContext:
    facade: AllocatorFacade
    discover: Callable[[], Topology]
    started_at: float
    body_timeout_seconds: float  # request_body_timeout_seconds (daemon/settings.py)
    diagnostics: Callable[[], dict[str, Any]] = dict  # the daemon's; empty where not given
    energy_price: EnergyPrice | None = None  # energy_price_per_kwh and energy_currency


CONTEXT = web.AppKey("context", ApiContext)


def context_of(request: web.Request) -> ApiContext:
    return request.app[CONTEXT]
