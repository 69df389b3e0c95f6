"""The tools that change a lease or a GPU, besides allocate: renew, free, and the admin
tools drain, undrain and revoke. The daemon decides who may: the server only asks it."""

from __future__ import annotations

import time
from typing import Any

from gpulease import Client

from gpuallocd.mcp.answers import Answer
from gpuallocd.mcp.shapes import gpu_line, gpu_view, lease_line, lease_view

__all__ = ["CHANGES"]


def _lease_answer(verb: str, raw: dict[str, Any]) -> Answer:
    view = lease_view(raw, time.time())
    return Answer(f"{verb}: {lease_line(view)}", view)


def renew(client: Client, args: dict[str, Any]) -> Answer:
    lease = client.renew(args["lease_id"], args.get("ttl_seconds"))
    return _lease_answer("renewed", lease.raw)


def free(client: Client, args: dict[str, Any]) -> Answer:
    return _lease_answer("freed", client.free(args["lease_id"]).raw)


def revoke(client: Client, args: dict[str, Any]) -> Answer:
    return _lease_answer("revoked", client.revoke(args["lease_id"], args.get("reason")).raw)


def _gpus_answer(verb: str, statuses: list[Any]) -> Answer:
    now = time.time()
    views = [gpu_view(status.raw, now) for status in statuses]
    return Answer("\n".join([verb] + [gpu_line(view) for view in views]), {"gpus": views})


def drain(client: Client, args: dict[str, Any]) -> Answer:
    return _gpus_answer("drained", client.drain(args["gpus"], args["reason"]))


def undrain(client: Client, args: dict[str, Any]) -> Answer:
    return _gpus_answer("undrained", client.undrain(args["gpus"]))


CHANGES = {"renew": renew, "free": free, "revoke": revoke, "drain": drain, "undrain": undrain}
