"""The live parts of the page as HTML: the GPUs (with MIG instances and shares), the queue,
the recent history. Every value from the node is escaped."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpuallocd.dashboard.source import NodeNow
from gpuallocd.dashboard.text import clock_time, duration, esc, gib, user_of
from gpuallocd.model import HistoryEvent
from gpuallocd.model.actors import rule_of
from gpuallocd.model.power import gpu_power_cell, power_text
from gpuallocd.model.queue_text import held_for, why_waiting

__all__ = ["gpus_html", "history_html", "queue_html", "reservations_html"]

GPU_HEAD = (
    "GPU",
    "state",
    "memory used",
    "load",
    "power",  # draw of cap (`120/250 W`), where a GPU reports power
    "holder",
    "label",
    "time left",
    "lease",
)  # processes without a lease have a section of their own, above (summary.py)


POWER_COLUMN = GPU_HEAD.index("power")


def _table(css: str, head: Sequence[str], rows: list[str], empty: str) -> str:
    if not rows:
        return f'<p class="empty">{esc(empty)}</p>'
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    return (
        f'<table class="{css}"><thead><tr>{th}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _row(cells: Sequence[str], attrs: str) -> str:
    return f"<tr {attrs}>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"


def _time_left(expires_at: float | None, now: float) -> str:
    return "-" if expires_at is None else duration(expires_at - now)


def _memory(gpu: dict[str, Any]) -> str:
    used, total = gpu["memory_used_bytes"], gpu["memory_total_bytes"]
    return f"{gib(used)} / {gib(total)}" if used is not None else gib(total)


def _load(gpu: dict[str, Any]) -> str:
    load = gpu["utilization_percent"]
    if load is None:
        return "-"
    return f'<meter min="0" max="100" value="{load:.0f}"></meter> {load:.0f} %'


def _preemptible(gpu: dict[str, Any]) -> str:
    """` (preemptible)`, or ` (preempted for bob, ends 14:07)` (docs/preemption.md)."""
    if not gpu.get("preemptible"):
        return ""
    preemption = gpu.get("preemption")
    if not preemption:
        return " (preemptible)"
    return f" (preempted for {preemption['for']}, ends {clock_time(preemption['deadline_at'])})"


def _gpu_row(gpu: dict[str, Any], node: NodeNow, power: bool) -> str:
    state = gpu["state"]
    if gpu["drain"]:
        state += f" ({gpu['drain']['reason']})"
    elif gpu["reserved_for"] and state == "reserved":
        state += ", " + held_for(gpu["reserved_for"])
    model = "" if node.one_model else f" <small>{esc(gpu['name'])}</small>"
    cells = [
        f"{gpu['index']}{model}",
        esc(state),
        _memory(gpu),
        _load(gpu),
        esc(gpu_power_cell(gpu.get("power")) or "-"),
        f'<span class="holder">{esc(user_of(gpu["holder"]) + _preemptible(gpu))}</span>',
        f'<span class="label">{esc(gpu["label"])}</span>',
        _time_left(gpu["expires_at"], node.now),
        f"<code>{esc(gpu['lease_id'] or '')}</code>",
    ]
    return _row(
        _columns(cells, power),
        f'class="gpu state-{esc(gpu["state"])}" data-gpu="{esc(gpu["uuid"])}"',
    )


def _part_rows(gpu: dict[str, Any], node: NodeNow, power: bool) -> list[str]:
    """A row for each MIG instance and each memory share, under its GPU."""
    rows = []
    for mig in gpu["instances"]:
        label = node.labels.get(mig["lease_id"]) if mig["lease_id"] else None
        cells = _part_cells(f"MIG {mig['mig_profile']}", mig["state"], mig, label, node.now)
        rows.append(_row(_columns(cells, power), f'class="part state-{esc(mig["state"])}"'))
    for share in gpu["shares"]:
        name = f"share {gib(share['memory_bytes'])}"
        cells = _part_cells(name, "leased", share, node.labels.get(share["lease_id"]), node.now)
        rows.append(_row(_columns(cells, power), 'class="part state-leased"'))
    return rows


def _columns(cells: list[str], power: bool) -> list[str]:
    """The cells of a row of the GPUs' table: without the power column where no GPU of
    the node reports power."""
    return cells if power else cells[:POWER_COLUMN] + cells[POWER_COLUMN + 1 :]


def _part_cells(
    name: str, state: str, part: dict[str, Any], label: str | None, now: float
) -> list[str]:
    return [
        f"&#x2514; {esc(name)}",
        esc(state),
        gib(part.get("memory_total_bytes")) if "memory_total_bytes" in part else "",
        "",
        "",
        f'<span class="holder">{esc(user_of(part["holder"]))}</span>',
        f'<span class="label">{esc(label)}</span>',
        _time_left(part["expires_at"], now),
        f"<code>{esc(part['lease_id'] or '')}</code>",
    ]


def gpus_html(node: NodeNow, user_name: Callable[[int], str]) -> str:
    """Every GPU, its MIG instances and shares under it; the power column (draw of cap at
    the last reading) where any GPU reports power."""
    power = any(gpu_power_cell(gpu.get("power")) for gpu in node.gpus)
    rows = []
    for gpu in node.gpus:
        rows.append(_gpu_row(gpu, node, power))
        rows.extend(_part_rows(gpu, node, power))
    return _table("gpus", _columns(list(GPU_HEAD), power), rows, "no GPU on this node")


def power_html(node: NodeNow) -> str:
    """The power line under the GPUs, where they report power (`power_text`); where a power
    budget is set, a gauge of the watts committed of it before the words."""
    if not node.power:
        return ""
    return f'<p class="power">{_budget_gauge(node.power)}{esc(power_text(node.power))}</p>'


def _budget_gauge(power: dict[str, Any]) -> str:
    """`<meter>` of the committed watts of `power_budget_watts` (the figures `queue` and
    `doctor` give); nothing without a budget. Past 90 % of it the gauge reads high."""
    budget = power.get("budget_watts")
    if not budget:
        return ""
    committed = power["committed_watts"]
    title = f"{committed:,.0f} of {budget:,.0f} W committed"
    return (
        f'<meter class="power-budget" min="0" max="{budget:.0f}" high="{budget * 0.9:.0f}" '
        f'optimum="0" value="{committed:.0f}" title="{esc(title)}">{esc(title)}</meter> '
    )


def queue_html(node: NodeNow) -> str:
    rows = []
    for waiter in node.queue:
        wants = f"GPU {', '.join(map(str, waiter['gpus']))}" if waiter["gpus"] else ""
        wants = wants or f"{waiter['count']} GPU(s)"
        start = waiter["estimated_start_at"]
        cells = [
            str(waiter["position"]),
            esc(waiter["owner"]["user"]),
            f'<span class="label">{esc(waiter["label"])}</span>',
            esc(wants),
            duration(waiter["waited_seconds"]),
            esc(why_waiting(waiter)),
            "unknown" if start is None else f"in {duration(start - node.now)}",
        ]
        rows.append(_row(cells, f'class="waiter" data-waiter="{esc(waiter["id"])}"'))
    head = ("#", "user", "label", "wants", "waiting", "why", "estimated start")
    return _table("queue", head, rows, "nobody is waiting")


def _reservation_row(reservation: dict[str, Any], node: NodeNow) -> str:
    indices = reservation.get("gpu_indices") or []
    if reservation["state"] == "scheduled":
        when = f"starts in {duration(reservation['start_at'] - node.now)}"
    else:
        when = f"running, ends in {duration(reservation['end_at'] - node.now)}"
    waits = ", ".join(w["user"] for w in reservation.get("waiting_for") or [])
    cells = [
        f"<code>{esc(reservation['id'])}</code>",
        esc(f"GPU {', '.join(map(str, indices))}"),
        esc(reservation["for"]),
        f"{clock_time(reservation['start_at'])} to {clock_time(reservation['end_at'])}",
        esc(when + (f"; waits for leases of {waits}" if waits else "")),
        esc(reservation["reason"]),
    ]
    return _row(cells, f'class="reservation" data-reservation="{esc(reservation["id"])}"')


def reservations_html(node: NodeNow) -> str:
    """Advance reservations to come or running: they go ahead of every waiter."""
    rows = [_reservation_row(r, node) for r in node.reservations]
    head = ("reservation", "GPUs", "for", "window", "state", "reason")
    return _table("reservations", head, rows, "no advance reservation")


def history_html(events: Sequence[HistoryEvent], user_name: Callable[[int], str]) -> str:
    rows = [
        _row(
            [
                clock_time(e.at),
                esc(e.event.value),
                f"<code>{esc(e.lease_id)}</code>",
                esc(rule_of(e.actor_uid, e.detail) or user_name(e.actor_uid)),
                esc(e.detail),
            ],
            f'class="event event-{esc(e.event.value)}"',
        )
        for e in reversed(events)
    ]
    return _table("history", ("when", "event", "lease", "by", "detail"), rows, "no history yet")
