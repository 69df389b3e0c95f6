"""The read tools: the node, my leases, the queue, my usage and limits, reservations, a
lease's history and the environment of a lease. Each runs in a worker thread with a client
of its own and changes nothing."""

from __future__ import annotations

import os
import shlex
import time
from typing import Any
from urllib.parse import quote, urlencode

from gpulease import Client, Lease, visible_devices_env

from gpuallocd.errors import InvalidRequest, PermissionDenied
from gpuallocd.mcp.answers import Answer
from gpuallocd.mcp.shapes import gpu_line, gpu_view, lease_line, lease_view

__all__ = ["READS"]


def gpus(client: Client, args: dict[str, Any]) -> Answer:
    statuses = client.request("GET", "/v1/gpus")["gpus"]
    now = time.time()
    views = [gpu_view(status, now) for status in statuses]
    free = sum(1 for view in views if view["state"] == "free")
    lines = [f"{free} of {len(views)} GPUs free"] + [gpu_line(view) for view in views]
    return Answer("\n".join(lines), {"gpus": views})


def my_leases(client: Client, args: dict[str, Any]) -> Answer:
    leases = client.request("GET", "/v1/leases")["leases"]
    now = time.time()
    mine = [lease_view(lease, now) for lease in leases if lease["owner"]["uid"] == os.getuid()]
    lines = [f"you hold {len(mine)} active lease(s)"] + [lease_line(view) for view in mine]
    return Answer("\n".join(lines), {"leases": mine})


def queue(client: Client, args: dict[str, Any]) -> Answer:
    data = client.request("GET", "/v1/queue")
    waiters = data["waiters"]
    for waiter in waiters:
        waiter["mine"] = waiter["owner"]["uid"] == os.getuid()
    lines = [f"{len(waiters)} request(s) waiting ({data.get('order', 'fifo')})"]
    lines += [_waiter_line(waiter) for waiter in waiters]
    return Answer("\n".join(lines), {"order": data.get("order"), "waiters": waiters})


def _waiter_line(waiter: dict[str, Any]) -> str:
    whose = "yours" if waiter["mine"] else waiter["owner"]["user"]
    text = f"{waiter['position']}. {whose}: {waiter['reason']}: {waiter.get('reason_detail', '')}"
    start = waiter.get("estimated_start_at")
    if start is not None:
        text += f"; estimated start in {max(0, round(start - time.time()))} s"
    return text


def my_usage(client: Client, args: dict[str, Any]) -> Answer:
    hours = float(args.get("hours", 24))
    now = time.time()
    query = urlencode({"since": now - hours * 3600, "until": now})
    data: dict[str, Any] = client.request("GET", f"/v1/usage?{query}")
    mine = [row for row in data.get("users", []) if row.get("uid") == os.getuid()]
    used = sum(row.get("gpu_hours", 0.0) for row in mine)
    return Answer(
        f"{used:.2f} GPU-hours in the last {hours:g} h",
        {"hours": hours, "usage": mine[0] if mine else None},
    )


def my_limits(client: Client, args: dict[str, Any]) -> Answer:
    data = client.limits()
    lines = [f"limits of {data['user']}" + (" (an admin)" if data.get("admin") else "")]
    for entry in data["limits"]:
        value, current = entry.get("value"), entry.get("current")
        entry["remaining"] = None if value is None else max(0, value - (current or 0))
        left = entry["remaining"]
        shown = "no limit" if value is None else f"{value}, used {current}, left {left}"
        lines.append(f"{entry['limit']}: {shown} ({entry['source']})")
    return Answer("\n".join(lines), data)


def reservations(client: Client, args: dict[str, Any]) -> Answer:
    found = client.reservations()
    lines = [f"{len(found)} reservation(s) to come or running"]
    lines += [
        f"{r['id']}: GPU {r.get('gpu_indices')} for {r['for']} from {r['start_at']:.0f} "
        f"to {r['end_at']:.0f} ({r['state']}): {r['reason']}"
        for r in found
    ]
    return Answer("\n".join(lines), {"reservations": found})


def lease_history(client: Client, args: dict[str, Any]) -> Answer:
    lease_id = args["lease_id"]
    events = client.history(lease_id, limit=1000)
    lines = [f"lease {lease_id}: {len(events)} event(s)"]
    lines += [
        f"{e['at']:.0f} {e['event']} by {(e.get('actor') or {}).get('user', e.get('actor_uid'))}"
        + (f": {e['detail']}" if e.get("detail") else "")
        for e in events
    ]
    return Answer("\n".join(lines), {"lease_id": lease_id, "events": events})


def export_env(client: Client, args: dict[str, Any]) -> Answer:
    raw = client.request("GET", f"/v1/leases/{quote(args['lease_id'], safe='')}")
    if raw["owner"]["uid"] != os.getuid():
        raise PermissionDenied(f"lease {raw['id']} is not yours", lease=raw["id"])
    lease = Lease.from_json(raw)
    try:
        env = visible_devices_env(lease, args.get("visible", "uuid"))
    except ValueError as exc:  # MIG instances by index
        raise InvalidRequest(str(exc), field="visible") from None
    prefix = " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())
    return Answer(
        f"prefix commands with: env {prefix}",
        {"lease_id": lease.id, "state": lease.state, "env": env, "prefix": f"env {prefix}"},
    )


READS = {
    "gpus": gpus,
    "my_leases": my_leases,
    "queue": queue,
    "my_usage": my_usage,
    "my_limits": my_limits,
    "reservations": reservations,
    "lease_history": lease_history,
    "export_env": export_env,
}
