"""The read tools: the node, my leases, the queue, reservations, a lease's history and the
environment of a lease (my usage and limits: `accounts.py`). Each runs in a worker thread
with a client of its own and changes nothing; other users' words go through the call's
`OthersText` (`foreign.py`)."""

from __future__ import annotations

import os
import shlex
import time
from typing import Any
from urllib.parse import quote

from gpulease import Client, Lease, visible_devices_env

from gpuallocd.errors import InvalidRequest, PermissionDenied
from gpuallocd.mcp.accounts import my_limits, my_usage
from gpuallocd.mcp.answers import Answer
from gpuallocd.mcp.commands import run_prefix
from gpuallocd.mcp.foreign import OthersText, name
from gpuallocd.mcp.readable import iso, span, when
from gpuallocd.mcp.shapes import gpu_line, gpu_view, lease_line, lease_view
from gpuallocd.model.queue_text import why_waiting

__all__ = ["READS", "others_of"]

# History events whose detail is the daemon's own words (numbers, pids, an Xid): shown as
# they are. A revoke's reason is its actor's; an adoption names the owner's own program;
# anything else (unleased use names another user's program) is someone else's words.
DAEMON_WORDS = frozenset(
    {"granted", "renewed", "freed", "expired", "warned", "enforced", "unhealthy"}
)


def others_of(args: dict[str, Any]) -> OthersText:
    """The call's view of other users' words: shown only when it asked (`others_text`)."""
    return OthersText(show=bool(args.get("others_text", False)))


def gpus(client: Client, args: dict[str, Any]) -> Answer:
    others = others_of(args)
    statuses = client.request("GET", "/v1/gpus")["gpus"]
    now = time.time()
    views = [gpu_view(status, now, others) for status in statuses]
    free = sum(1 for view in views if view["state"] == "free")
    lines = [f"{free} of {len(views)} GPUs free"] + [gpu_line(view, now) for view in views]
    return Answer(others.framed(lines), {"gpus": views, **others.notice()})


def my_leases(client: Client, args: dict[str, Any]) -> Answer:
    others = OthersText()  # the caller's own leases: its own labels
    leases = client.request("GET", "/v1/leases")["leases"]
    now = time.time()
    mine = [
        lease_view(lease, now, others) for lease in leases if lease["owner"]["uid"] == others.me
    ]
    lines = [f"you hold {len(mine)} active lease(s)"] + [lease_line(view, now) for view in mine]
    return Answer("\n".join(lines), {"leases": mine})


def queue(client: Client, args: dict[str, Any]) -> Answer:
    others = others_of(args)
    data = client.request("GET", "/v1/queue")
    now = time.time()
    waiters = [_waiter_view(waiter, now, others) for waiter in data["waiters"]]
    order = data.get("order") or "fifo"
    served = "first come, first served" if order == "fifo" else "by fair share"
    lines = [f"{len(waiters)} request(s) waiting, served {served}"]
    lines += [_waiter_line(view, now) for view in waiters]
    return Answer(others.framed(lines), {"order": order, "waiters": waiters, **others.notice()})


def _waiter_view(waiter: dict[str, Any], now: float, others: OthersText) -> dict[str, Any]:
    owner = waiter["owner"]
    start = waiter.get("estimated_start_at")
    return {
        "position": waiter["position"],
        "owner": name(owner["user"]),
        "mine": owner["uid"] == others.me,
        "reason": waiter.get("reason"),
        "reason_detail": waiter.get("reason_detail"),
        "count": waiter.get("count"),
        "gpus": waiter.get("gpus") or [],
        "policy": waiter.get("policy"),
        "label": others.value(waiter.get("label"), owner["user"], owner["uid"]),
        "waiting_since": iso(waiter.get("since")),
        "waited_seconds": round(waiter.get("waited_seconds") or 0.0, 1),
        "estimated_start_at": iso(start),
        "estimated_start_in_seconds": None if start is None else max(0.0, round(start - now)),
    }


def _waiter_line(view: dict[str, Any], now: float) -> str:
    whose = "yours" if view["mine"] else view["owner"]
    text = f"{view['position']}. {whose}: {why_waiting(view)}"
    text += f"; waiting {span(view['waited_seconds'])}"
    if view["estimated_start_in_seconds"] is not None:
        text += f"; estimated start {when(now + view['estimated_start_in_seconds'], now)}"
    if view["label"] is not None:
        text += f"; label {OthersText.words(view['label'])}"
    return text


def reservations(client: Client, args: dict[str, Any]) -> Answer:
    others = others_of(args)
    now = time.time()
    found = client.reservations()
    views = [_reservation_view(each, others) for each in found]
    lines = [f"{len(views)} reservation(s) to come or running"]
    lines += [_reservation_line(view, each, now) for view, each in zip(views, found, strict=True)]
    return Answer(others.framed(lines), {"reservations": views, **others.notice()})


def _reservation_view(found: dict[str, Any], others: OthersText) -> dict[str, Any]:
    by = found.get("by") or {}
    return {
        "id": found["id"],
        "gpus": found.get("gpu_indices") or [],
        "for": name(found["for"]),
        "state": found["state"],
        "starts_at": iso(found["start_at"]),
        "ends_at": iso(found["end_at"]),
        "by": name(by.get("user", "")) or None,
        "reason": others.value(found.get("reason"), by.get("user"), by.get("uid")),
    }


def _reservation_line(view: dict[str, Any], found: dict[str, Any], now: float) -> str:
    start, end = found["start_at"], found["end_at"]
    text = (
        f"{view['id']}: GPU {', '.join(map(str, view['gpus']))} for {view['for']} "
        f"from {when(start, now)} to {when(end, now)} ({view['state']})"
    )
    if view["by"]:
        text += f", by {view['by']}"
    if view["reason"] is not None:
        text += f": {OthersText.words(view['reason'])}"
    return text


def lease_history(client: Client, args: dict[str, Any]) -> Answer:
    others = others_of(args)
    lease_id = args["lease_id"]
    owner = client.request("GET", f"/v1/leases/{quote(lease_id, safe='')}")["owner"]
    found = client.history(lease_id, limit=1000)
    events = [_event_view(event, owner, others) for event in found]
    lines = [f"lease {lease_id} of {name(owner['user'])}: {len(events)} event(s)"]
    lines += [_event_line(view, event["at"]) for view, event in zip(events, found, strict=True)]
    data = {"lease_id": lease_id, "owner": name(owner["user"]), "events": events}
    return Answer(others.framed(lines), {**data, **others.notice()})


def _detail(event: dict[str, Any], owner: dict[str, Any], others: OthersText) -> Any:
    """An event's detail: the daemon's own words as they are, anyone's through `others`."""
    detail, kind = event.get("detail"), event["event"]
    if detail is None or kind in DAEMON_WORDS:
        return detail
    if kind == "revoked":
        actor = event.get("actor") or {}
        return others.value(detail, actor.get("user"), event.get("actor_uid"))
    if kind == "adopted":
        return others.value(detail, owner["user"], owner["uid"])
    return others.value(detail, None, None)


def _event_view(event: dict[str, Any], owner: dict[str, Any], others: OthersText) -> dict[str, Any]:
    energy = event.get("energy") or {}
    return {
        "event": event["event"],
        "at": iso(event["at"]),
        "by": name((event.get("actor") or {}).get("user", event.get("actor_uid"))),
        "detail": _detail(event, owner, others),
        "energy_kwh": None if not energy else round(energy["kwh"], 6),
        "energy_estimate": bool(energy.get("estimate")),
    }


def _event_line(view: dict[str, Any], at: float) -> str:
    text = f"{time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(at))} {view['event']}"
    text += f" by {view['by']}"
    if view["detail"] is not None:
        text += f": {OthersText.words(view['detail'])}"
    if view["energy_kwh"] is not None:
        estimate = " (an estimate)" if view["energy_estimate"] else ""
        text += f"; drew {view['energy_kwh']:.3g} kWh{estimate}"
    return text


def export_env(client: Client, args: dict[str, Any]) -> Answer:
    raw = client.request("GET", f"/v1/leases/{quote(args['lease_id'], safe='')}")
    if raw["owner"]["uid"] != os.getuid():
        raise PermissionDenied(f"lease {raw['id']} is not yours", lease=raw["id"])
    lease = Lease.from_json(raw)
    try:
        env = visible_devices_env(lease, args.get("visible", "uuid"))
    except ValueError as exc:  # MIG instances by index
        raise InvalidRequest(str(exc), field="visible") from None
    prefix = " ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    run = run_prefix(lease.id, client.socket_path)
    text = (
        f"prefix commands with: env {prefix}\n"
        f"for long work, or work that must outlive this session, start it with: {run} COMMAND "
        "(in the background: nohup ... > LOG 2>&1 &); it keeps the lease while it runs, "
        "renewed, and the lease ends when it and this session have both ended"
    )
    data = {"lease_id": lease.id, "state": lease.state, "env": env, "prefix": f"env {prefix}"}
    return Answer(text, {**data, "run_prefix": run})


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
