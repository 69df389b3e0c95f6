"""Charts as SVG text, drawn here with no plotting library: GPU-hours and kWh per user per
day, a timeline of leases per GPU, and waiting times. Pure: data in, an SVG document out."""

from __future__ import annotations

from gpuallocd.charts.bars import BarGroup, stacked_bars
from gpuallocd.charts.daily import Interval, daily_bars, gpu_timelines, waiting_bars
from gpuallocd.charts.timeline import timeline

__all__ = [
    "BarGroup",
    "Interval",
    "daily_bars",
    "gpu_timelines",
    "stacked_bars",
    "timeline",
    "waiting_bars",
]
