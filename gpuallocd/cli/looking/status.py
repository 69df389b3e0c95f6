"""`gpuallocctl status`: every GPU as gpustat shows it, with who holds it and for how long."""

from __future__ import annotations

import collections
import json
import time
from typing import Any

import click

from gpuallocd.cli.common import daemon_client, preemption_text, user_of
from gpuallocd.cli.looking.reservation_text import reservation_lines
from gpuallocd.cli.looking.watch import watch_frames
from gpuallocd.cli.output import echo_json, escape_unprintable
from gpuallocd.cli.quantities import Duration, format_left
from gpuallocd.cli.style import colour_enabled, render_table, short_uuid, state_cell
from gpuallocd.cli.table_fit import fit_columns, terminal_width
from gpuallocd.model.power import gpu_power_cell, power_text
from gpuallocd.model.queue_text import held_for

__all__ = ["COMMANDS", "render_status"]

NAME_WIDTH = 20
VENDOR_PREFIXES = ("NVIDIA ", "AMD ")
HEADERS = ("IDX", "UUID", "NAME", "MEMORY", "UTIL", "POWER", "STATE", "HOLDER")


def _gib(value: int) -> str:
    gib = value / 2**30
    return f"{gib:.0f}" if gib >= 100 else f"{gib:.1f}"


def _memory(gpu: dict[str, Any]) -> str | None:
    total, used = gpu.get("memory_total_bytes"), gpu.get("memory_used_bytes")
    if total is None:
        return None if used is None else f"{_gib(used)} GiB used"
    # No live reading (a topology file): the size alone, never read as memory in use.
    return f"{_gib(total)} GiB total" if used is None else f"{_gib(used)}/{_gib(total)} GiB"


def _name(name: str, verbose: bool) -> str:
    if verbose:
        return name
    for prefix in VENDOR_PREFIXES:
        name = name.removeprefix(prefix)
    return name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"


def _utilisation(gpu: dict[str, Any]) -> str | None:
    percent = gpu.get("utilization_percent")
    return None if percent is None else f"{percent:.0f}%"


def _foreign(gpu: dict[str, Any]) -> list[str]:
    processes = gpu.get("foreign_processes")
    if processes is None:  # a daemon from before foreign_processes: pids only
        processes = [{"pid": pid, "uid": None} for pid in gpu.get("foreign_pids", [])]
    unleased = {u["pid"]: u for u in gpu.get("unleased", [])}
    return [_process(p, unleased.get(p["pid"])) for p in processes]


def _process(process: dict[str, Any], unleased: dict[str, Any] | None) -> str:
    """`bob(4242)`; one found using the GPU without a lease: `bob(4242 python) without a lease`."""
    if unleased is None:
        return f"{user_of(process.get('uid'))}({process['pid']})"
    signalled = f", {unleased['signalled']} sent" if unleased.get("signalled") else ""
    command = escape_unprintable(str(unleased["command"]))
    return f"{unleased['user']}({process['pid']} {command}) without a lease{signalled}"


def _holder(gpu: dict[str, Any], now: float) -> str | None:
    parts: list[str] = []
    holder, reserved = gpu.get("holder"), gpu.get("reserved_for")
    if holder is not None:
        label = f" ({gpu['label']})" if gpu.get("label") else ""
        left = format_left(gpu.get("expires_at"), now)
        parts.append(f"{holder['user']}{label}" + (f" {left} left" if left else ""))
        if gpu.get("preemptible"):
            parts.append(preemption_text(gpu.get("preemption"), now))
    elif reserved is not None and gpu.get("state") == "reserved":
        parts.append(held_for(reserved))
    drain = gpu.get("drain")
    if drain:
        parts.append(f"drained by {drain.get('by') or '?'}: {drain.get('reason') or '-'}")
    if not gpu.get("healthy", True) and gpu.get("health_reason"):
        parts.append(str(gpu["health_reason"]))
    parts += _foreign(gpu)
    return "; ".join(parts) or None


def _row(gpu: dict[str, Any], now: float, verbose: bool) -> tuple[object, ...]:
    uuid = gpu["uuid"] if verbose else short_uuid(gpu["uuid"])
    return (
        gpu["index"],
        uuid,
        _name(gpu.get("name") or "unknown", verbose),
        _memory(gpu),
        _utilisation(gpu),
        gpu_power_cell(gpu.get("power")),
        state_cell(str(gpu["state"])),
        _holder(gpu, now),
    )


def _lease_holder(part: dict[str, Any], now: float) -> str | None:
    """`alice (sweep-3) 59m12s left` for a leased instance or share, as a whole GPU's row
    reads (`leases` gives the lease's id)."""
    holder = part.get("holder")
    if holder is None:
        return None
    left = format_left(part.get("expires_at"), now)
    label = f" ({part['label']})" if part.get("label") else ""
    return f"{holder['user']}{label}" + (f" {left} left" if left else "")


def _part_rows(gpu: dict[str, Any], now: float, verbose: bool) -> list[tuple[object, ...]]:
    """A row under a GPU for each of its MIG instances and memory shares."""
    index = gpu["index"]
    instances: list[tuple[object, ...]] = [
        (
            f"{index}/mig",
            m["uuid"] if verbose else short_uuid(m["uuid"]),
            m["mig_profile"],
            f"{_gib(m['memory_total_bytes'])} GiB" if m.get("memory_total_bytes") else None,
            None,
            None,
            state_cell(str(m["state"])),
            _lease_holder(m, now),
        )
        for m in gpu.get("instances") or []
    ]
    shares = [
        (
            f"{index}/share",
            None,
            "share",
            f"{_gib(s['memory_bytes'])} GiB",
            None,
            None,
            state_cell("leased"),
            _lease_holder(s, now),
        )
        for s in gpu.get("shares") or []
    ]
    return instances + shares


def _summary(gpus: list[dict[str, Any]], waiters: int) -> str:
    counts = collections.Counter(str(g["state"]) for g in gpus)
    states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    queue = f"{waiters} waiting" if waiters else "nobody waiting"
    return f"{len(gpus)} GPUs: {states}; {queue}"


def render_status(
    gpus: list[dict[str, Any]],
    waiters: int,
    *,
    now: float,
    verbose: bool,
    colour: bool,
    width: int | None = None,
) -> str:
    """The summary line and the table, as `status` prints them: within `width` columns
    (columns dropped by priority, the last cut) unless `verbose`."""
    width = None if verbose else width
    rows = [
        row
        for g in sorted(gpus, key=lambda g: g["index"])
        for row in (_row(g, now, verbose), *_part_rows(g, now, verbose))
    ]
    headers: tuple[str, ...] = HEADERS
    if not any(g.get("power") for g in gpus):  # no GPU reports power: no column of dashes
        power = HEADERS.index("POWER")
        headers = HEADERS[:power] + HEADERS[power + 1 :]
        rows = [row[:power] + row[power + 1 :] for row in rows]
    if width is not None:
        headers, rows = fit_columns(headers, rows, width)
    table = render_table(headers, rows, colour=colour, width=width)
    summary = _summary(gpus, waiters)
    notes = [escape_unprintable(u["message"]) for g in gpus for u in g.get("unleased", [])]
    below = "".join(f"\n{note}" for note in notes)
    return f"{click.style(summary, dim=True) if colour else summary}\n{table}{below}"


def _fetch(ctx: click.Context) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    """`/v1/gpus` (the GPUs and the process-tracking mode), the number of waiters and the
    advance reservations."""
    with daemon_client(ctx) as client:
        node: dict[str, Any] = client.request("GET", "/v1/gpus")
        queue = client.request("GET", "/v1/queue")
    return node, len(queue["waiters"]), queue.get("reservations") or []


def _frame(ctx: click.Context, verbose: bool, colour: bool) -> str:
    node, waiters, reservations = _fetch(ctx)
    gpus = node["gpus"]
    if ctx.obj.json:
        return json.dumps(_json_view(node) | {"at": time.time()}, sort_keys=True)
    now = time.time()
    width = terminal_width()
    frame = render_status(gpus, waiters, now=now, verbose=verbose, colour=colour, width=width)
    if verbose and node.get("process_tracking"):
        frame += f"\nprocess tracking: {node['process_tracking']} (docs/security.md)"
    if node.get("power"):
        frame += "\n" + power_text(node["power"])
    return frame + ("\n" + reservation_lines(reservations, now).rstrip() if reservations else "")


def _json_view(node: dict[str, Any]) -> dict[str, Any]:
    view = {"gpus": node["gpus"], "process_tracking": node.get("process_tracking")}
    return view | ({"power": node["power"]} if node.get("power") else {})


@click.command(short_help="Every GPU: state, holder, memory and load")
@click.option(
    "-v", "--verbose", is_flag=True, help="Full UUIDs and names, every column; no width limit."
)
@click.option(
    "-w",
    "--watch",
    type=Duration(minimum=0.1),
    is_flag=False,
    flag_value="2",
    default=None,
    metavar="[SECONDS]",
    help="Redraw every SECONDS (default 2; 5s, 1m ...) until Ctrl-C.",
)
@click.pass_context
def status(ctx: click.Context, verbose: bool, watch: float | None) -> None:
    """Every GPU: index, UUID, name, memory used, utilisation, state, holder.

    States: free, leased, reserved (held for a waiter), in-use (someone's process outside a
    lease), draining, unhealthy, lost (fallen off the bus). HOLDER gives the lease's user,
    label and time left, the waiter a reserved GPU is held for, and foreign processes as
    user(pid).
    """
    colour = colour_enabled()
    if watch is None:
        if ctx.obj.json:
            echo_json(_json_view(_fetch(ctx)[0]))
            return
        click.echo(_frame(ctx, verbose, colour))
        return
    watch_frames(lambda: _frame(ctx, verbose, colour), watch, json_lines=ctx.obj.json)


COMMANDS = (status,)
