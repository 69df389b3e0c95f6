"""Preemption on the wire (docs/preemption.md): the fields a preemptible request may carry,
an admin's preemption, and a job's acknowledged checkpoint.

A checkpoint's path is text the job gives: checked for its length and for characters that
could steer a terminal, recorded as given, never opened by the daemon. Only the lease's
owner acknowledges (the caller from the kernel, SO_PEERCRED).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from gpuallocd.allocator.site.preempt_bounds import PreemptAsk
from gpuallocd.api.requests import caller_of, facade_of, read_body
from gpuallocd.api.validation import Body
from gpuallocd.errors import InvalidRequest
from gpuallocd.model import Lease

__all__ = ["MAX_CHECKPOINT_PATH", "PREEMPT_FIELDS", "preempt_fields", "preemption_routes"]

PREEMPT_FIELDS = (
    "preemptible",
    "preempt_min_runtime_seconds",
    "preempt_lead_seconds",
    "preempt_grace_seconds",
    "preempt_signal",
    "requeue_of",
)
TERMS = ("preempt_min_runtime_seconds", "preempt_lead_seconds", "preempt_grace_seconds")
MAX_CHECKPOINT_PATH = 4096  # PATH_MAX
MAX_REASON_LENGTH = 500
MAX_LEASE_ID = 100

LeaseJson = Callable[[web.Request, Lease], dict[str, Any]]


def preempt_fields(body: Body) -> dict[str, Any]:
    """The allocate body's preemption fields as AllocateSpec's; terms without `preemptible`
    (or a requeue, which is preemptible) are refused rather than ignored."""
    preemptible = bool(body.boolean("preemptible"))
    requeue_of = body.text("requeue_of", max_length=MAX_LEASE_ID)
    asked = PreemptAsk(
        min_runtime_seconds=body.seconds("preempt_min_runtime_seconds", zero=True),
        lead_seconds=body.seconds("preempt_lead_seconds", zero=True),
        grace_seconds=body.seconds("preempt_grace_seconds", zero=True),
        signal=body.text("preempt_signal", max_length=16),
    )
    given = [name for name in (*TERMS, "preempt_signal") if body.has(name)]
    if given and not (preemptible or requeue_of):
        raise InvalidRequest(
            f"{given[0]} is for a preemptible lease: add preemptible", field=given[0]
        )
    return {
        "preemptible": preemptible or requeue_of is not None,
        "preempt": asked,
        "requeue_of": requeue_of,
    }


async def preempt_lease(request: web.Request, lease_json: LeaseJson) -> web.Response:
    """An admin preempts a preemptible lease past its minimum runtime: the contract begins."""
    caller = caller_of(request)
    body = await read_body(request, frozenset({"reason"}))
    reason = body.text("reason", max_length=MAX_REASON_LENGTH)
    facade = facade_of(request)
    record = await facade.preemption.preempt(caller, request.match_info["lease_id"], reason)
    lease = await facade.lease(record.lease_id)
    return web.json_response({"lease": lease_json(request, lease), "preemption": record.to_json()})


async def checkpoint_done(request: web.Request) -> web.Response:
    """The lease's job saved a checkpoint at `path` (its owner only): during a preemption the
    lease ends now; after it, the acknowledgement is recorded as late."""
    caller = caller_of(request)
    body = await read_body(request, frozenset({"path"}))
    path = body.text("path", max_length=MAX_CHECKPOINT_PATH)
    if path is not None and not path.strip():
        raise InvalidRequest("path may not be blank: leave it out", field="path")
    facade = facade_of(request)
    answer = await facade.preemption.checkpoint_done(caller, request.match_info["lease_id"], path)
    return web.json_response(answer)


def preemption_routes(lease_json: LeaseJson) -> list[web.RouteDef]:
    async def preempt(request: web.Request) -> web.Response:
        return await preempt_lease(request, lease_json)

    return [
        web.post("/v1/leases/{lease_id}/preempt", preempt),
        web.post("/v1/leases/{lease_id}/checkpoint", checkpoint_done),
    ]
