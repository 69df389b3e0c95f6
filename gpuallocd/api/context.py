"""What the routes share: the allocator's façade, how to rediscover the node, the start time,
and the daemon's diagnostics (for `gpuallocctl doctor`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gpuallocd.allocator import AllocatorFacade
from gpuallocd.model import Topology

__all__ = ["CONTEXT", "ApiContext", "context_of"]


@dataclass(frozen=True)
class ApiContext:
    facade: AllocatorFacade
    discover: Callable[[], Topology]
    started_at: float
    body_timeout_seconds: float  # request_body_timeout_seconds (daemon/settings.py)
    diagnostics: Callable[[], dict[str, Any]] = dict  # the daemon's; empty where not given
    # the config's warnings and a refused reload (daemon/config_check.py), for health/doctor
    config_report: Callable[[], dict[str, Any]] = dict


CONTEXT = web.AppKey("context", ApiContext)


def context_of(request: web.Request) -> ApiContext:
    return request.app[CONTEXT]
