"""The preview tool: what a request would get now and where, or why not and from when.

It runs the placement policy on the live machine (`plan` over the daemon's topology, with the
GPUs that are not free now taken) and checks the caller's `max_gpus` limit. When the request
does not fit now, the start it could expect if it waited is estimated the way the queue shows
its own: leases end at their current expiry, and the waiters ahead are served first. Like
the queue's estimate it is a floor, not a promise (a renewal pushes it back), and it does not
model advance reservations, which the `reservations` tool lists. A request that names no
policy is previewed with the one the daemon would use, which the daemon says
(`GET /v1/policies`).
"""

from __future__ import annotations

import time
from typing import Any

from gpulease import Client

from gpuallocd.errors import CapacityError
from gpuallocd.mcp.allocation import allocate_options
from gpuallocd.mcp.foreign import OthersText, name
from gpuallocd.mcp.readable import iso, when
from gpuallocd.model.figures import significant
from gpuallocd.planning import Plan, make_plan, make_unit_plan
from gpuallocd.policies import get_policy
from gpuallocd.topology import topology_from_json

__all__ = ["preview"]


def default_policy(client: Client) -> str:
    """The policy the daemon gives a request that names none (its `default_policy`)."""
    found: str = client.request("GET", "/v1/policies")["default"]
    return found


def preview(client: Client, args: dict[str, Any]) -> dict[str, Any]:
    """The preview as data; `summary` in words."""
    others = OthersText(show=bool(args.get("others_text", False)))
    options = allocate_options(args)
    options["policy"] = options["policy"] or default_policy(client)
    topology = topology_from_json(client.topology())
    statuses: list[dict[str, Any]] = client.request("GET", "/v1/gpus")["gpus"]
    waiters: list[dict[str, Any]] = client.request("GET", "/v1/queue")["waiters"]
    named = topology.resolve_all(options["gpus"] or ())
    count = options["count"] or max(len(named), 1)
    busy = [status["uuid"] for status in statuses if status["state"] != "free"]
    result: dict[str, Any] = {"count": count, "quota": _quota(client, count)}
    try:
        plan = _plan(topology, options, count, busy, named)
    except CapacityError as exc:  # a caller's mistake is the tool's error instead
        result["now"] = None
        result["why_not_now"] = {"code": exc.code, "message": exc.message}
        result.update(_later(statuses, waiters, count, named, others))
    else:
        result["now"] = plan.to_json()
    result["summary"] = others.framed([_summary(result)])
    result.update(others.notice())
    return result


def _plan(
    topology: Any, options: dict[str, Any], count: int, busy: list[str], named: tuple[str, ...]
) -> Plan:
    if options["memory_bytes"] is not None or options["mig_profile"] is not None:
        return make_unit_plan(
            topology,
            count,
            memory_bytes=options["memory_bytes"],
            mig_profile=options["mig_profile"],
            busy=busy,
            required=named,
        )
    policy = get_policy(options["policy"])
    return make_plan(topology, policy, count, busy=busy, required=named)


def _quota(client: Client, count: int) -> dict[str, Any] | None:
    """The caller's `max_gpus` if this request would pass it now."""
    for entry in client.limits()["limits"]:
        value, current = entry.get("value"), entry.get("current") or 0
        if entry["limit"] == "max_gpus" and value is not None and current + count > value:
            return {"limit": "max_gpus", "value": value, "current": current}
    return None


def _later(
    statuses: list[dict[str, Any]],
    waiters: list[dict[str, Any]],
    count: int,
    named: tuple[str, ...],
    others: OthersText,
) -> dict[str, Any]:
    """The estimated start if it waited, the leases it would wait for, the waiters ahead."""
    now = time.time()
    free = sum(1 for status in statuses if status["state"] == "free")
    ahead = sum(w.get("count") or len(w.get("gpus") or ()) or 1 for w in waiters)
    leased = sorted(
        (s for s in statuses if s.get("expires_at") is not None and s["state"] == "leased"),
        key=lambda s: s["expires_at"],
    )
    if named:
        blocking = [s for s in leased if s["uuid"] in named]
        start = max((s["expires_at"] for s in blocking), default=None)
    else:
        need = count + ahead - free
        blocking = leased[: max(need, 0)]
        start = blocking[-1]["expires_at"] if 0 < need <= len(leased) else None
    return {
        "estimated_start_at": iso(start),
        "estimated_start_in_seconds": None if start is None else max(0.0, round(start - now)),
        "waiters_ahead": len(waiters),
        "waiting_for": [_blocking(s, now, others) for s in blocking],
    }


def _blocking(status: dict[str, Any], now: float, others: OthersText) -> dict[str, Any]:
    holder = status.get("holder") or {}
    return {
        "gpu": status["index"],
        "holder": name(holder.get("user", "")) or None,
        "label": others.value(status.get("label"), holder.get("user"), holder.get("uid")),
        "expires_at": iso(status["expires_at"]),
        "seconds_left": max(0.0, round(status["expires_at"] - now)),
    }


def _summary(result: dict[str, Any]) -> str:
    quota = result["quota"]
    prefix = ""
    if quota is not None:
        prefix = (
            f"over your limit: max_gpus = {significant(quota['value'])}, you hold "
            f"{significant(quota['current'])}; an allocate would be refused (quota_exceeded). "
        )
    plan = result["now"]
    if plan is not None:
        gpus = ", ".join(map(str, plan["gpus"]))
        return prefix + f"fits now: GPU {gpus} (policy {plan['policy']}): {plan['reason']}"
    text = prefix + f"does not fit now: {result['why_not_now']['message']}"
    if result.get("estimated_start_in_seconds") is not None:
        now = time.time()
        ending = ", ".join(
            f"GPU {w['gpu']} of {w['holder']} (label {OthersText.words(w['label'])})"
            if w["label"] is not None
            else f"GPU {w['gpu']} of {w['holder']}"
            for w in result["waiting_for"]
        )
        text += (
            f"; if it waited, it would start about "
            f"{when(now + result['estimated_start_in_seconds'], now)}, behind "
            f"{result['waiters_ahead']} waiter(s), when these leases end: {ending}"
        )
    else:
        text += "; no estimate: no lease on the GPUs it needs has an end in sight"
    return text
