"""What the routes share: the allocator's façade, how to rediscover the node, the start time,
the daemon's diagnostics (for `gpuallocctl doctor`) and the GPU driver's state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gpuallocd.allocator import AllocatorFacade
from gpuallocd.model import Topology

__all__ = ["CONTEXT", "ApiContext", "context_of"]


@dataclass(frozen=True)
class ApiContext:
    facade: AllocatorFacade
    discover: Callable[[], Awaitable[Topology]]  # off the event loop, with a deadline
    started_at: float
    body_timeout_seconds: float  # request_body_timeout_seconds (daemon/settings.py)
    diagnostics: Callable[[], dict[str, Any]] = dict  # the daemon's; empty where not given
    driver: Callable[[], dict[str, Any]] = dict  # the GPU driver's calls (driver_guard.py)


CONTEXT = web.AppKey("context", ApiContext)


def context_of(request: web.Request) -> ApiContext:
    return request.app[CONTEXT]
