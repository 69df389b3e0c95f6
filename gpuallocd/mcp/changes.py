"""The tools that change a lease or a GPU, besides allocate: renew, free, and the admin
tools drain, undrain and revoke. The daemon decides who may: the server only asks it. What
they answer shows other users' words withheld (a revoked lease's label is its owner's)."""

from __future__ import annotations

import time
from typing import Any

from gpulease import Client

from gpuallocd.mcp.answers import Answer
from gpuallocd.mcp.foreign import OthersText
from gpuallocd.mcp.shapes import gpu_line, gpu_view, lease_line, lease_view

__all__ = ["CHANGES"]


def _lease_answer(verb: str, raw: dict[str, Any]) -> Answer:
    others, now = OthersText(), time.time()
    view = lease_view(raw, now, others)
    return Answer(others.framed([f"{verb}: {lease_line(view, now)}"]), {**view, **others.notice()})


def renew(client: Client, args: dict[str, Any]) -> Answer:
    lease = client.renew(args["lease_id"], args.get("ttl_seconds"))
    return _lease_answer("renewed", lease.raw)


def free(client: Client, args: dict[str, Any]) -> Answer:
    return _lease_answer("freed", client.free(args["lease_id"]).raw)


def revoke(client: Client, args: dict[str, Any]) -> Answer:
    return _lease_answer("revoked", client.revoke(args["lease_id"], args.get("reason")).raw)


def _gpus_answer(verb: str, statuses: list[Any]) -> Answer:
    others, now = OthersText(), time.time()
    views = [gpu_view(status.raw, now, others) for status in statuses]
    lines = [verb] + [gpu_line(view, now) for view in views]
    return Answer(others.framed(lines), {"gpus": views, **others.notice()})


def drain(client: Client, args: dict[str, Any]) -> Answer:
    return _gpus_answer("drained", client.drain(args["gpus"], args["reason"]))


def undrain(client: Client, args: dict[str, Any]) -> Answer:
    return _gpus_answer("undrained", client.undrain(args["gpus"]))


CHANGES = {"renew": renew, "free": free, "revoke": revoke, "drain": drain, "undrain": undrain}
