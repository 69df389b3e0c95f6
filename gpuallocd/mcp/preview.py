"""The preview tool: what a request would get now and where, or why not and from when.

One call to the daemon's dry run (`POST /v1/leases/preview`, docs/api.md), which runs
allocate's own checks and choice on the live node and writes nothing: the policy it would
use (the daemon's `default_policy` where the request names none), the GPUs, the refusal
allocate would answer with its code, and, where the request does not fit now, the queue's
own estimate for the waiter it would be. Like the queue's estimate it is a floor, not a
promise (a renewal pushes it back). Here the answer is only worded, and others' labels
are withheld or quoted as everywhere in this server.
"""

from __future__ import annotations

import time
from typing import Any

from gpulease import Client

from gpuallocd.mcp.allocation import allocate_options
from gpuallocd.mcp.foreign import OthersText, name
from gpuallocd.mcp.readable import iso, when

__all__ = ["preview"]


def preview(client: Client, args: dict[str, Any]) -> dict[str, Any]:
    """The preview as data; `summary` in words."""
    others = OthersText(show=bool(args.get("others_text", False)))
    found = client.preview(**allocate_options(args))
    now = time.time()
    result: dict[str, Any] = {
        "outcome": found["outcome"],
        "policy": found["policy"],
        "now": _granted(found),
        "why_not_now": _refusal(found["refusal"]),
    }
    waiter = found["would_wait"]
    if waiter is not None:
        result.update(_later(waiter, now, others))
    result["summary"] = others.framed([_summary(result, now)])
    result.update(others.notice())
    return result


def _granted(found: dict[str, Any]) -> dict[str, Any] | None:
    if found["outcome"] != "granted":
        return None
    return {
        "policy": found["policy"],
        "gpus": [unit["index"] for unit in found["gpus"]],
        "uuids": [unit["uuid"] for unit in found["gpus"]],
        "expires_at": iso(found["expires_at"]),
        "power_limit_watts": found["power_limit_watts"],
        "preemptible": found["preemptible"] is not None,
    }


def _refusal(refusal: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if refusal is None else {"code": refusal["code"], "message": refusal["message"]}


def _later(waiter: dict[str, Any], now: float, others: OthersText) -> dict[str, Any]:
    """The estimated start if it waited, the waiters ahead, the leases it would wait for."""
    start = waiter["estimated_start_at"]
    return {
        "estimated_start_at": iso(start),
        "estimated_start_in_seconds": None if start is None else max(0.0, round(start - now)),
        "waiters_ahead": waiter["waiters_ahead"],
        "reason": waiter["reason"],
        "waiting_for": [_blocking(held, now, others) for held in waiter["waiting_for"]],
    }


def _blocking(held: dict[str, Any], now: float, others: OthersText) -> dict[str, Any]:
    holder = held["holder"]
    return {
        "gpu": held["gpus"][0]["index"],
        "holder": name(holder["user"]) or None,
        "label": others.value(held["label"], holder["user"], holder["uid"]),
        "expires_at": iso(held["expires_at"]),
        "seconds_left": max(0.0, round(held["expires_at"] - now)),
    }


def _summary(result: dict[str, Any], now: float) -> str:
    plan = result["now"]
    if plan is not None:
        gpus = ", ".join(map(str, plan["gpus"]))
        return f"fits now: GPU {gpus} (policy {plan['policy']})"
    refusal = result["why_not_now"]
    if refusal is None:
        text = f"does not fit now: it would wait (policy {result['policy']})"
    else:
        text = f"an allocate would be refused ({refusal['code']}): {refusal['message']}"
    if "waiters_ahead" not in result:
        return text
    if result.get("estimated_start_in_seconds") is not None:
        ending = ", ".join(
            f"GPU {w['gpu']} of {w['holder']} (label {OthersText.words(w['label'])})"
            if w["label"] is not None
            else f"GPU {w['gpu']} of {w['holder']}"
            for w in result["waiting_for"]
        )
        text += (
            f"; if it waited, it would start about "
            f"{when(now + result['estimated_start_in_seconds'], now)}, behind "
            f"{result['waiters_ahead']} waiter(s)"
        )
        return text + (f", when these leases end: {ending}" if ending else "")
    return text + "; no estimate: no lease on the GPUs it needs has an end in sight"
