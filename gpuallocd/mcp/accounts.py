"""The caller's own accounts: `my_usage` (GPU-hours, leases, waiting, energy and its cost
over a window, 7 days unless asked, as `gpuallocctl usage`) and `my_limits` (each limit
with its unit, where it was set, the use and what remains: the daemon's figures, rounded).
"""

from __future__ import annotations

import os
import time
from typing import Any

from gpulease import Client

from gpuallocd.mcp.answers import Answer
from gpuallocd.mcp.readable import amount, at_text, iso, span
from gpuallocd.model.durations import typed_duration

__all__ = ["DEFAULT_USAGE_HOURS", "my_limits", "my_usage"]

DEFAULT_USAGE_HOURS = 7 * 24.0  # the command line's `usage --since 7d`
PLACES = 6  # figures in the JSON: to the millionth, never 16 digits


def _unit(limit: str) -> str:
    """What a limit counts, for the text: `GPUs`, `GPU-hours`, `kWh`, `W`..."""
    if limit.startswith("max_gpu_hours_"):
        return "GPU-hours"
    if limit.startswith("max_kwh_"):
        return "kWh"
    return {
        "max_gpus": "GPUs",
        "max_waiting": "requests waiting",
        "max_shares": "memory shares",
        "max_power_limit_watts": "W",
        "max_ttl_seconds": "seconds",
    }.get(limit, "")


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, PLACES)


def _figure(value: float, unit: str) -> str:
    return span(value) if unit == "seconds" else amount(value, unit)


def _limit_line(entry: dict[str, Any]) -> str:
    limit, value, unit = entry["limit"], entry["value"], entry["unit"]
    if value is None:
        return f"{limit}: no limit"
    text = f"{limit}: {_figure(value, unit)}"
    if entry.get("remaining") is not None:
        used = _figure(entry["current"] or 0.0, unit)
        text += f"; you use {used}, {_figure(entry['remaining'], unit)} left"
    return f"{text} (set by {entry['source']})"


def my_limits(client: Client, args: dict[str, Any]) -> Answer:
    data = client.limits()
    entries = [
        {
            "limit": entry["limit"],
            "unit": _unit(entry["limit"]),
            "value": _rounded(entry.get("value")),
            "source": entry["source"],
            "current": _rounded(entry.get("current")),
            "remaining": _rounded(entry.get("remaining")),
        }
        for entry in data["limits"]
    ]
    lines = [f"limits of {data['user']}" + (" (an admin)" if data.get("admin") else "")]
    lines += [_limit_line(entry) for entry in entries]
    view = {"user": data["user"], "admin": bool(data.get("admin")), "limits": entries}
    return Answer("\n".join(lines), view)


def my_usage(client: Client, args: dict[str, Any]) -> Answer:
    hours = float(args.get("hours", DEFAULT_USAGE_HOURS))
    now = time.time()
    since = now - hours * 3600
    data = client.usage(since=since, until=now, user=str(os.getuid()))
    rows = [row for row in data.get("users", []) if row.get("uid") == os.getuid()]
    row = rows[0] if rows else {}
    price = data.get("energy_price")
    view = {
        "since": iso(since),
        "until": iso(now),
        "hours": hours,
        "gpu_hours": _rounded(row.get("gpu_hours", 0.0)),
        "leases": int(row.get("leases", 0)),
        "waited_seconds": round(row.get("waiting_seconds", 0.0), 1),
        "energy_kwh": _rounded(row.get("energy_kwh", 0.0)),
        "energy_estimate": bool(row.get("energy_estimate")),
        "energy_cost": None if price is None else _cost(row, price),
        "unleased_gpu_hours": _rounded(row.get("unleased_gpu_hours", 0.0)),
        "unleased_energy_kwh": _rounded(row.get("unleased_energy_kwh", 0.0)),
        "budgets": [_budget(b) for b in data.get("budgets") or [] if b.get("value") is not None],
    }
    return Answer(_usage_text(view, since, price), view)


def _cost(row: dict[str, Any], price: dict[str, Any]) -> dict[str, Any]:
    return {
        "amount": _rounded(row.get("energy_cost", 0.0)),
        "currency": price.get("currency") or "",
        "per_kwh": price["per_kwh"],
    }


def _budget(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "limit": entry["limit"],
        "unit": _unit(entry["limit"]),
        "value": _rounded(entry["value"]),
        "current": _rounded(entry.get("current")),
        "remaining": _rounded(entry.get("remaining")),
    }


def _usage_text(view: dict[str, Any], since: float, price: dict[str, Any] | None) -> str:
    lines = [
        f"your use in the last {typed_duration(view['hours'] * 3600)} "
        f"(since {at_text(since)}): "
        f"{amount(view['gpu_hours'], 'GPU-hours')} over {view['leases']} lease(s), "
        f"{span(view['waited_seconds'])} waited in the queue"
    ]
    energy = f"energy: {amount(view['energy_kwh'], 'kWh')}"
    if view["energy_estimate"]:
        energy += " (an estimate: shares and MIG instances are charged their part of a GPU)"
    if price is None:
        energy += "; no energy price is set on this machine"
    else:
        cost = view["energy_cost"]
        currency = cost["currency"]
        per_kwh = amount(price["per_kwh"], f"{currency}/kWh".lstrip("/"))
        energy += f", costing {amount(cost['amount'], currency)} at {per_kwh}"
    lines.append(energy)
    if view["unleased_gpu_hours"] or view["unleased_energy_kwh"]:
        lines.append(
            f"used without a lease: {amount(view['unleased_gpu_hours'], 'GPU-hours')}, "
            f"{amount(view['unleased_energy_kwh'], 'kWh')}"
        )
    lines += [
        f"budget {b['limit']}: {amount(b['value'], b['unit'])}, "
        f"{amount(b['remaining'] or 0.0, b['unit'])} left"
        for b in view["budgets"]
    ]
    return "\n".join(lines)
