"""The preview tool: what a request would get now and where, or why not and from when.

It runs the placement policy on the live machine (`plan` over the daemon's topology, with the
GPUs that are not free now taken) and checks the caller's `max_gpus` limit. When the request
does not fit now, the start it could expect if it waited is estimated the way the queue shows
its own: leases end at their current expiry, and the waiters ahead are served first. Like
the queue's estimate it is a floor, not a promise (a renewal pushes it back), and it does not
model advance reservations, which the `reservations` tool lists.
"""

from __future__ import annotations

import time
from typing import Any

from gpulease import Client

from gpuallocd.errors import CapacityError
from gpuallocd.mcp.allocation import allocate_options
from gpuallocd.planning import Plan, make_plan, make_unit_plan
from gpuallocd.policies import get_policy
from gpuallocd.topology import topology_from_json

__all__ = ["preview"]

DEFAULT_POLICY = "best-effort"  # the daemon's default_policy unless the site changed it


def preview(client: Client, args: dict[str, Any]) -> dict[str, Any]:
    """The preview as data; `summary` in words."""
    options = allocate_options(args)
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
        result.update(_later(statuses, waiters, count, named))
    else:
        result["now"] = plan.to_json()
    result["summary"] = _summary(result)
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
    policy = get_policy(options["policy"] or DEFAULT_POLICY)
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
        "estimated_start_at": start,
        "estimated_start_in_seconds": None if start is None else max(0.0, round(start - now)),
        "waiters_ahead": len(waiters),
        "waiting_for": [
            {
                "gpu": s["index"],
                "holder": (s.get("holder") or {}).get("user"),
                "label": s.get("label"),
                "seconds_left": max(0.0, round(s["expires_at"] - now)),
            }
            for s in blocking
        ],
    }


def _summary(result: dict[str, Any]) -> str:
    quota = result["quota"]
    prefix = ""
    if quota is not None:
        prefix = (
            f"over your limit: max_gpus = {quota['value']}, you hold {quota['current']}; "
            "an allocate would be refused (quota_exceeded). "
        )
    plan = result["now"]
    if plan is not None:
        return prefix + f"fits now: GPU {plan['gpus']} ({plan['policy']}): {plan['reason']}"
    text = prefix + f"does not fit now: {result['why_not_now']['message']}"
    if result.get("estimated_start_in_seconds") is not None:
        text += (
            f"; if it waited, estimated start in ~{result['estimated_start_in_seconds']:.0f} s "
            f"(behind {result['waiters_ahead']} waiter(s), when the leases on GPU "
            f"{[w['gpu'] for w in result['waiting_for']]} end)"
        )
    else:
        text += "; no estimate: no lease on the GPUs it needs has an end in sight"
    return text
