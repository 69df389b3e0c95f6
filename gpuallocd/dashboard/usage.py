"""The table of use per user beside the charts: GPU-hours, kWh and, where the site set
`energy_price_per_kwh`, the cost in its currency, over the charts' 30 days."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuallocd.dashboard.text import esc
from gpuallocd.model.energy import EnergyPrice

__all__ = ["usage_table"]

TITLE = "Use per user, 30 days"


def _summed(days: Sequence[Mapping[str, float]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for day in days:
        for user, value in day.items():
            totals[user] = totals.get(user, 0.0) + value
    return totals


def usage_table(
    hours: Sequence[Mapping[str, float]],
    kwh: Sequence[Mapping[str, float]],
    price: EnergyPrice | None,
) -> str:
    """Each user's GPU-hours, kWh and cost (with a price), the most GPU-hours first, from
    the charts' figures per day; the kWh are the user's leased and unleased energy, as
    `usage` counts them (shares and MIG instances estimated). No kWh or cost column where
    no energy was read (`-` for a user without any where others have some)."""
    gpu_hours, energy = _summed(hours), _summed(kwh)
    users = sorted(gpu_hours.keys() | energy.keys(), key=lambda u: (-gpu_hours.get(u, 0.0), u))
    if not users:
        return ""
    head = ["user", "GPU-hours"]
    if energy:
        head.append("kWh")
    priced = price if energy else None
    if priced is not None:
        head.append(f"cost {priced.currency}".strip())
    rows = "".join(_row(user, gpu_hours.get(user, 0.0), energy, priced) for user in users)
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    return (
        f'<figure class="chart usage" id="usage-per-user"><figcaption>{TITLE}</figcaption>'
        f'<table class="usage"><thead><tr>{th}</tr></thead><tbody>{rows}</tbody>'
        "</table></figure>"
    )


def _row(user: str, hours: float, energy: Mapping[str, float], price: EnergyPrice | None) -> str:
    cells = [esc(user), f"{hours:,.1f}"]
    used = energy.get(user)
    if energy:
        cells.append("-" if used is None else f"{used:,.2f}")
    if price is not None:
        cells.append("-" if used is None else f"{price.cost(used):,.2f}")
    return "<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"
