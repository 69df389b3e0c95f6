"""`gpuallocctl limits` and `usage`: the limits that apply to a user, and accounting."""

from __future__ import annotations

import datetime
import re
import time
from pathlib import Path
from typing import Any

import click

from gpuallocd.cli.common import daemon_client
from gpuallocd.cli.errors import EXIT_USAGE, CliError
from gpuallocd.cli.output import echo_json, table
from gpuallocd.cli.quantities import energy_text, format_duration
from gpuallocd.cli.style import render_table
from gpuallocd.cli.table_fit import terminal_width
from gpuallocd.model.figures import significant

__all__ = ["COMMANDS", "parse_since"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_since(text: str, now: float | None = None) -> float:
    """`7d`, `12h`, `30m`, `90s`, `2w` ago, or a date `2025-05-01` / `2025-05-01T08:00` (local
    time), as Unix time."""
    match = _DURATION.match(text)
    if match:
        now = time.time() if now is None else now
        return now - float(match.group(1)) * _UNITS[match.group(2)]
    try:
        return datetime.datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither a duration (7d, 12h, 30m) nor a date (2025-05-01)"
        ) from None


def _show(value: float | None) -> str | None:
    """A limit's figure to three significant digits: a kWh budget of 0.05 beside a use of
    0.0123, not of 0.01."""
    return None if value is None else significant(value)


def _limit_rows(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (
            entry["limit"],
            _show(entry["value"]) or "none",
            entry["source"],
            _show(entry["current"]),
            _show(entry.get("remaining")),
        )
        for entry in report["limits"]
    ]


@click.command(short_help="The limits that apply to you, and your use of each")
@click.option("--user", help="Another user's limits (name or uid; default: yours).")
@click.option("--json", "local_json", is_flag=True, help="JSON output (as the global --json).")
@click.pass_context
def limits(ctx: click.Context, user: str | None, local_json: bool) -> None:
    """The limits that apply to you (or --user), where each was set, and the current use."""
    with daemon_client(ctx) as client:
        report = client.limits(user)
    if ctx.obj.json or local_json:
        echo_json(report)
        return
    groups = ", ".join(report["groups"]) or "-"
    admin = ", admin" if report["admin"] else ""
    click.echo(f"limits of {report['user']} (uid {report['uid']}{admin}; groups: {groups})")
    click.echo(table(("LIMIT", "VALUE", "FROM", "CURRENT", "REMAINING"), _limit_rows(report)))


def _decayed(user: dict[str, Any]) -> str:
    value = user.get("decayed_gpu_hours")
    return "-" if value is None else f"{value:.2f}"


def _usage_rows(users: list[dict[str, Any]], priced: bool) -> list[tuple[Any, ...]]:
    rows = [
        (
            u["user"],
            f"{u['gpu_hours']:.2f}",
            u["leases"],
            format_duration(u["waiting_seconds"]),
            _decayed(u),
            energy_text(u.get("energy_kwh", 0.0), u.get("energy_estimate", False)),
            *((f"{u.get('energy_cost', 0.0):.2f}",) if priced else ()),
        )
        for u in users
    ]
    if len(users) > 1:
        hours = sum(u["gpu_hours"] for u in users)
        waited = format_duration(sum(u["waiting_seconds"] for u in users))
        leases = sum(u["leases"] for u in users)
        kwh = energy_text(
            sum(u.get("energy_kwh", 0.0) for u in users),
            any(u.get("energy_estimate") for u in users),
        )
        cost = sum(u.get("energy_cost", 0.0) for u in users)
        total = ("TOTAL", f"{hours:.2f}", leases, waited, "", kwh)
        rows.append(total + ((f"{cost:.2f}",) if priced else ()))
    return rows


def _usage_headers(price: dict[str, Any] | None) -> tuple[str, ...]:
    """The per-user table's columns: 80 columns hold them with a 12-letter user name and an
    estimated kWh (docs/cli.md); use without a lease has a table of its own."""
    headers = ["USER", "GPU-HOURS", "LEASES", "WAITED", "DECAYED", "KWH"]
    if price is not None:
        headers.append(f"COST {price['currency']}".strip())
    return tuple(headers)


def _unleased_rows(users: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each user who used GPUs without a lease in the window: GPU-hours and kWh."""
    return [
        (u["user"], f"{u['unleased_gpu_hours']:.2f}", f"{u.get('unleased_energy_kwh', 0.0):.3f}")
        for u in users
        if u.get("unleased_gpu_hours") or u.get("unleased_energy_kwh")
    ]


def _preemptible_rows(users: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each user who held preemptible leases in the window: those GPU-hours (part of their
    GPU-HOURS above)."""
    return [
        (u["user"], f"{u['preemptible_gpu_hours']:.2f}")
        for u in users
        if u.get("preemptible_gpu_hours")
    ]


def _group_rows(groups: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            g["group"],
            g["users"],
            f"{g['gpu_hours']:.2f}",
            energy_text(g["energy_kwh"], g["energy_estimate"]),
        )
        for g in groups
    ]


def _budget_rows(budgets: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (b["limit"], significant(b["value"]), significant(b["current"]), _show(b["remaining"]))
        for b in budgets
    ]


def _reservation_rows(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (r["id"], r["for"], r["gpus"], f"{r['gpu_hours']:.2f}", r["reason"])
        for r in report.get("reservations") or []
    ]


@click.command(short_help="GPU-hours, leases, waits and energy per user")
@click.option("--since", default="7d", show_default=True, help="A duration ago or a date.")
@click.option("--user", help="Only this user (name or uid).")
@click.option("--json", "local_json", is_flag=True, help="JSON output (as the global --json).")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Draw GPU-hours per user per day to FILE (.svg; .png with chromium installed).",
)
@click.pass_context
def usage(
    ctx: click.Context, since: str, user: str | None, local_json: bool, plot: Path | None
) -> None:
    """GPU-hours, leases, hours waited and energy per user, from the history (like sreport)."""
    start = parse_since(since)
    if plot is not None:
        from gpuallocd.cli.looking.usage_plot import unwritable, write_plot

        with daemon_client(ctx) as client:
            try:
                write_plot(client, plot, start, user)
            except OSError as exc:
                raise CliError(unwritable(plot, exc), EXIT_USAGE) from None
        click.echo(f"wrote {plot}")
        return
    with daemon_client(ctx) as client:
        report = client.usage(since=start, user=user)
    if ctx.obj.json or local_json:
        echo_json(report)
        return
    span = " to ".join(
        time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) for t in (start, report["until"])
    )
    click.echo(f"usage from {span}")
    price = report.get("energy_price")
    rows = _usage_rows(report["users"], price is not None)
    click.echo(table(_usage_headers(price), rows))
    unleased = _unleased_rows(report["users"])
    if unleased:
        click.echo("used without a lease (docs/enforcement.md)")
        click.echo(table(("USER", "GPU-HOURS", "KWH"), unleased))
    preemptible = _preemptible_rows(report["users"])
    if preemptible:
        click.echo("of which in preemptible leases (docs/preemption.md)")
        click.echo(table(("USER", "GPU-HOURS"), preemptible))
    groups = report.get("groups") or []
    if groups and not user:
        click.echo("groups (each user in their primary group)")
        click.echo(table(("GROUP", "USERS", "GPU-HOURS", "KWH"), _group_rows(groups)))
    budgets = [b for b in report.get("budgets") or [] if b["value"] is not None]
    if budgets:
        click.echo("budgets")
        click.echo(table(("BUDGET", "VALUE", "USED", "REMAINING"), _budget_rows(budgets)))
    reserved = _reservation_rows(report)
    if reserved:
        click.echo("reservations")
        headers = ("ID", "FOR", "GPUS", "GPU-HOURS", "REASON")
        click.echo(render_table(headers, reserved, width=terminal_width()))


COMMANDS = (limits, usage)
