"""The daemon's GPUs and leases as an agent reads them: the fields that matter, moments as
ISO 8601 and seconds left, other users' words through the call's `OthersText`, and one line
of words for each."""

from __future__ import annotations

import os
from typing import Any

from gpuallocd.mcp.foreign import OthersText, name
from gpuallocd.mcp.readable import iso, when
from gpuallocd.model.queue_text import held_for

__all__ = ["gpu_line", "gpu_view", "lease_line", "lease_view"]

GIB = 2**30


def _left(expires_at: float | None, now: float) -> float | None:
    return None if expires_at is None else max(0.0, round(expires_at - now, 1))


def gpu_view(status: dict[str, Any], now: float, others: OthersText) -> dict[str, Any]:
    """One GPU: who holds it and until when; the lease's label and a drain's reason are
    their writers' words (`others`)."""
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
        "holder": name(holder["user"]) if holder.get("user") else None,
        "lease_id": status.get("lease_id"),
        "label": others.value(status.get("label"), holder.get("user"), holder.get("uid")),
        "expires_at": iso(status.get("expires_at")),
        "seconds_left": _left(status.get("expires_at"), now),
        "reserved_for": (status.get("reserved_for") or {}).get("user"),
        "held_for": _held(status.get("reserved_for")),
        "drain_reason": others.value(drain.get("reason"), drain.get("by"), None),
        "drained_by": name(drain["by"]) if drain.get("by") else None,
    }


def _held(reserved: dict[str, Any] | None) -> str | None:
    """What a free GPU is held for, in the CLI's and the dashboard's words."""
    return None if not reserved else held_for({**reserved, "user": name(reserved["user"])})


def gpu_line(view: dict[str, Any], now: float) -> str:
    text = f"GPU {view['index']}"
    if view["name"] and view["name"] != text:
        text += f" ({view['name']})"
    text += f" {view['uuid']}: {view['state']}"
    if view["holder"]:
        text += f" by {view['holder']}"
        if view["seconds_left"] is not None:
            text += f" until {when(now + view['seconds_left'], now)}"
        if view["label"] is not None:
            text += f"; label {OthersText.words(view['label'])}"
    if view["held_for"]:
        text += f"; {view['held_for']}"
    if view["drain_reason"] is not None:
        text += f"; drained by {view['drained_by']}: {OthersText.words(view['drain_reason'])}"
    if view["memory_total_bytes"]:
        used, total = view["memory_used_bytes"] or 0, view["memory_total_bytes"]
        text += f"; {used / GIB:.1f} of {total / GIB:.1f} GiB used"
    if view["utilization_percent"] is not None:
        text += f", load {view['utilization_percent']:g} %"
    return text


def lease_view(lease: dict[str, Any], now: float, others: OthersText) -> dict[str, Any]:
    """A lease; `ends_with_this_session`: bound to this server's process; `follows_work`:
    it outlives its holder while work started with its environment runs."""
    bound = bool(lease.get("bound_to_process"))
    owner = lease["owner"]
    return {
        "id": lease["id"],
        "state": lease["state"],
        "owner": name(owner["user"]),
        "gpus": [
            {k: g.get(k) for k in ("index", "uuid", "kind", "memory_bytes", "mig_profile")}
            for g in lease["gpus"]
        ],
        "label": others.value(lease.get("label"), owner["user"], owner["uid"]),
        "policy": lease.get("policy"),
        "granted_at": iso(lease.get("created_at")),
        "expires_at": iso(lease.get("expires_at")),
        "ended_at": iso(lease.get("ended_at")),
        "seconds_left": _left(lease.get("expires_at"), now) if lease["state"] == "active" else None,
        "power_limit_watts": lease.get("power_limit_watts"),
        "bound_to_process": bound,
        "ends_with_this_session": bound and lease.get("pid") == os.getpid(),
        "follows_work": bound and bool(lease.get("follow_work")),
    }


def _gpu_names(view: dict[str, Any]) -> str:
    units = []
    for gpu in view["gpus"]:
        if gpu.get("kind") == "mig":
            units.append(f"{gpu['index']} (MIG {gpu.get('mig_profile')} {gpu['uuid']})")
        elif gpu.get("kind") == "share":
            units.append(f"{gpu['index']} (a {gpu['memory_bytes'] / GIB:g} GiB share)")
        else:
            units.append(str(gpu["index"]))
    return ", ".join(units)


def lease_line(view: dict[str, Any], now: float) -> str:
    text = f"lease {view['id']} of {view['owner']}: GPU {_gpu_names(view)}, {view['state']}"
    if view["label"] is not None:
        text += f", label {OthersText.words(view['label'])}"
    if view["power_limit_watts"] is not None:
        text += f", power capped at {view['power_limit_watts']:g} W"
    if view["state"] != "active":
        return text
    if view["seconds_left"] is not None:
        text += f", until {when(now + view['seconds_left'], now)}"
    if view["ends_with_this_session"] and view["follows_work"]:
        text += "; ends with this session, or later with the last command you started with "
        text += "its environment"
    elif view["ends_with_this_session"]:
        text += "; ends with this session"
    elif not view["bound_to_process"]:
        text += "; kept until freed or expired"
    return text
