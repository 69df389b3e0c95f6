"""What a GPU tells of its power: energy counter, draw and power limits, in NVML's units."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PowerCap", "PowerReading", "cap_text", "gpu_power_cell", "power_text"]


@dataclass(frozen=True, slots=True)
class PowerReading:
    """One GPU's power now; each figure None where the card or driver cannot tell.

    `energy_mj` is the driver's counter (millijoules since it loaded; it restarts at 0 when
    the driver reloads, and is absent before Volta). Limits bound the sustained draw.
    """

    energy_mj: int | None = None
    draw_mw: int | None = None
    limit_mw: int | None = None
    default_limit_mw: int | None = None
    min_limit_mw: int | None = None
    max_limit_mw: int | None = None


@dataclass(frozen=True, slots=True)
class PowerCap:
    """One GPU capped for one lease: the limit set, and the one to put back at its end."""

    gpu_uuid: str
    lease_id: str
    set_mw: int
    restore_mw: int


def power_text(power: Mapping[str, Any]) -> str:
    """`power: 1,450 of 1,600 W committed, 900 W drawn`, as `status` and the dashboard say it
    (`GET /v1/gpus`'s `power`; without a budget: `power: 1,450 W committed, ...`)."""
    budget = power.get("budget_watts")
    of = f" of {budget:,.0f} W" if budget is not None else " W"
    drawn = f"{power['drawn_watts']:,.0f} W drawn"
    return f"power: {power['committed_watts']:,.0f}{of} committed, {drawn}"


def cap_text(lease: Mapping[str, Any]) -> str | None:
    """`power capped at 100 W per GPU (60 W asked: the cards take no less)` where the cards
    took another cap than the one asked for (a lease's JSON); None where they took it."""
    asked, cap = lease.get("power_limit_requested_watts"), lease.get("power_limit_watts")
    if asked is None or cap is None:
        return None
    bound = "less" if asked < cap else "more"
    return f"power capped at {cap:g} W per GPU ({asked:g} W asked: the cards take no {bound})"


def gpu_power_cell(power: Mapping[str, Any] | None) -> str | None:
    """`120/250 W`: a GPU's draw and its power limit at the last reading (`GET /v1/gpus`'s
    per-GPU `power`); None where the GPU reports no power."""
    if not power or power.get("limit_watts") is None:
        return None
    draw = power.get("draw_watts")
    drawn = "?" if draw is None else f"{draw:,.0f}"
    return f"{drawn}/{power['limit_watts']:,.0f} W"
