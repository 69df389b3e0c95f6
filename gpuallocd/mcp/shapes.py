"""The daemon's GPUs and leases as an agent reads them: the fields that matter, times as
seconds left rather than epochs, and one line of words for each."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["gpu_line", "gpu_view", "lease_line", "lease_view"]

GIB = 2**30


def _left(expires_at: float | None, now: float) -> float | None:
    return None if expires_at is None else max(0.0, round(expires_at - now, 1))


def gpu_view(status: dict[str, Any], now: float) -> dict[str, Any]:
    holder = status.get("holder") or {}
    drain = status.get("drain") or {}
    return {
        "index": status["index"],
        "uuid": status["uuid"],
        "name": status.get("name"),
        "state": status["state"],
        "memory_used_bytes": status.get("memory_used_bytes"),
        "memory_total_bytes": status.get("memory_total_bytes"),
        "utilization_percent": status.get("utilization_percent"),
        "holder": holder.get("user"),
        "lease_id": status.get("lease_id"),
        "label": status.get("label"),
        "seconds_left": _left(status.get("expires_at"), now),
        "reserved_for": (status.get("reserved_for") or {}).get("user"),
        "drain_reason": drain.get("reason"),
    }


def gpu_line(view: dict[str, Any]) -> str:
    text = f"GPU {view['index']}"
    if view["name"] and view["name"] != text:
        text += f" {view['name']}"
    text += f" {view['uuid']}: {view['state']}"
    if view["memory_total_bytes"]:
        used, total = view["memory_used_bytes"] or 0, view["memory_total_bytes"]
        text += f", {used / GIB:.1f}/{total / GIB:.1f} GiB used"
    if view["utilization_percent"] is not None:
        text += f", load {view['utilization_percent']}%"
    if view["holder"]:
        text += f", held by {view['holder']}"
        if view["label"]:
            text += f" ({view['label']})"
        if view["seconds_left"] is not None:
            text += f", {view['seconds_left']:.0f} s left"
    if view["reserved_for"]:
        text += f", held for waiting {view['reserved_for']}"
    if view["drain_reason"]:
        text += f", drained: {view['drain_reason']}"
    return text


def lease_view(lease: dict[str, Any], now: float) -> dict[str, Any]:
    """A lease; `ends_with_this_session`: bound to this server's process."""
    bound = bool(lease.get("bound_to_process"))
    return {
        "id": lease["id"],
        "state": lease["state"],
        "owner": lease["owner"]["user"],
        "gpus": [
            {k: g.get(k) for k in ("index", "uuid", "kind", "memory_bytes", "mig_profile")}
            for g in lease["gpus"]
        ],
        "label": lease.get("label"),
        "seconds_left": _left(lease.get("expires_at"), now),
        "bound_to_process": bound,
        "ends_with_this_session": bound and lease.get("pid") == os.getpid(),
    }


def lease_line(view: dict[str, Any]) -> str:
    gpus = ",".join(str(g["index"]) for g in view["gpus"])
    text = f"lease {view['id']}: GPU {gpus}, {view['state']}"
    if view["label"]:
        text += f" ({view['label']})"
    if view["state"] != "active":
        return text
    if view["seconds_left"] is not None:
        text += f", {view['seconds_left']:.0f} s left"
    if view["ends_with_this_session"]:
        text += ", ends with this session"
    elif not view["bound_to_process"]:
        text += ", kept until freed or expired"
    return text
