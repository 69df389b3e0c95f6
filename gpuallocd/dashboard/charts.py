"""The charts of the page, from the ledger: read and drawn on the dashboard's thread."""

from __future__ import annotations

from gpuallocd.charts import (
    Interval,
    daily_bars,
    gpu_timelines,
    stacked_bars,
    timeline,
    waiting_bars,
)
from gpuallocd.charts.svg import colors_by_rank, ranked
from gpuallocd.dashboard.source import NodeNow, read_charts
from gpuallocd.dashboard.usage import usage_table
from gpuallocd.ledger.reader import LedgerReader
from gpuallocd.model.energy import EnergyPrice

__all__ = ["charts_html"]

DAY = 86400.0
WAIT_TITLE = "Requests granted by time waited, 7 days"


def _figure(name: str, svg: str) -> str:
    return f'<figure class="chart" id="chart-{name}">{svg}</figure>'


def charts_html(reader: LedgerReader, node: NodeNow, price: EnergyPrice | None = None) -> str:
    """GPU-hours per user per day (7 and 30 days), kWh per user per day (30 days, where
    energy was read), leases per GPU (24 h), waiting times, and each user's GPU-hours, kWh
    and cost (with `price`) over the 30 days."""
    now = node.now
    data = read_charts(reader, now)
    month = daily_bars(data.bounds, data.hours)
    week = month[-7:]
    held = [
        Interval(s.gpu_uuid, s.created_at, s.ended_at, s.owner_name, s.label) for s in data.held
    ]
    rows = gpu_timelines(node.gpu_names(), held)
    waits = waiting_bars(data.waits)
    # One colour per user on the whole page, by GPU-hours over the month: the same user
    # reads the same in every chart, and no two users share one.
    totals: dict[str, float] = {}
    for day in month:
        for user, hours in day.values.items():
            totals[user] = totals.get(user, 0.0) + hours
    energy = daily_bars(data.bounds, data.kwh)
    others = {it.user for it in held} | {user for day in energy for user in day.values}
    colors = colors_by_rank(ranked(totals) + sorted(others - totals.keys()))
    unit = "GPU-hours"
    kwh = "kWh per user, 30 days (shares and MIG instances estimated)"
    return "".join(
        (
            _figure(
                "usage-7d",
                stacked_bars(week, title=f"{unit} per user, 7 days", unit=unit, colors=colors),
            ),
            _figure(
                "usage-30d",
                stacked_bars(month, title=f"{unit} per user, 30 days", unit=unit, colors=colors),
            ),
            _figure("energy-30d", stacked_bars(energy, title=kwh, unit="kWh", colors=colors))
            if any(day.values for day in energy)
            else "",
            _figure(
                "timeline",
                timeline(rows, now - DAY, now, title="Leases per GPU, 24 hours", colors=colors),
            ),
            _figure(
                "waiting",
                stacked_bars(waits, title=WAIT_TITLE, unit="requests", counts=True, colors=colors),
            ),
            usage_table(data.hours, data.kwh, price),
        )
    )
