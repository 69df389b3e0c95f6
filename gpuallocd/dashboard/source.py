"""What a page shows: the node now, read through the allocator's façade like `status`, and
what its charts show, read from the ledger.

The node's reads are of the allocator's in-memory view (no ledger query) and take
microseconds. The charts' reads (`read_charts`) run on the dashboard's thread, on its own
read-only connection: a month of use per user per day is one point of each user's running
totals a day (ledger/totals.py), whatever the history holds; the waiting times count the
last week's leases in SQL; the timeline reads the last day's leases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuallocd.allocator import AllocatorFacade
from gpuallocd.charts.daily import WAIT_BOUNDS, day_starts
from gpuallocd.ledger.reader import GpuSpan, LedgerReader
from gpuallocd.model.energy import JOULES_PER_KWH

__all__ = ["ChartData", "NodeNow", "read_charts", "read_node"]

DAY = 86400.0
MONTH_DAYS = 30
WEEK = 7 * DAY


@dataclass(frozen=True, slots=True)
class NodeNow:
    """The node at `now`: GPUs as `/v1/gpus` gives them, each lease's label, the queue,
    the advance reservations to come or running, and the processes found using a GPU
    without a lease (as `/v1/unleased` lists them)."""

    now: float
    name: str
    gpus: list[dict[str, Any]]
    labels: dict[str, str | None]
    queue: list[dict[str, Any]]
    reservations: list[dict[str, Any]]
    power: dict[str, Any] | None = None  # budget, committed and drawn watts (`status`)
    unleased: list[dict[str, Any]] = field(default_factory=list)

    @property
    def one_model(self) -> bool:
        """Whether every GPU is of one model (named once, above the table, then)."""
        return len({g["name"] for g in self.gpus}) <= 1

    def gpu_names(self) -> dict[str, str]:
        """Each GPU's and MIG instance's UUID to the name of its GPU's row (`GPU 0`)."""
        names = {}
        for gpu in self.gpus:
            name = f"GPU {gpu['index']}"
            names[gpu["uuid"]] = name
            for instance in gpu["instances"]:
                names[instance["uuid"]] = name
        return names


async def read_node(facade: AllocatorFacade, clock: Callable[[], float]) -> NodeNow:
    statuses = await facade.gpus.gpu_status()
    leases = await facade.leases()
    queue = await facade.waiters()
    reservations = await facade.scheduling.reservations()
    power = await facade.power.status()
    read = facade.power.gpu_power()  # the last reading's, as `GET /v1/gpus`: no driver call
    return NodeNow(
        now=clock(),
        name=facade.topology.name,
        gpus=[
            status.to_json()
            | facade.preemption.marks(status.lease)
            | {"power": read.get(status.gpu.uuid)}
            for status in statuses
        ],
        labels={lease.id: lease.label for lease in leases},
        queue=queue,
        reservations=reservations,
        unleased=facade.unleased.offenders(),
        power=power,
    )


@dataclass(frozen=True, slots=True)
class ChartData:
    """What the charts show: each day's start (the last bound is now), GPU-hours and kWh per
    user that day, (user, bucket, count) of the last week's waiting times, and the last
    day's leases on each GPU."""

    bounds: list[float]
    hours: list[dict[str, float]]
    kwh: list[dict[str, float]]
    waits: list[tuple[str, int, int]]
    held: list[GpuSpan]


def read_charts(reader: LedgerReader, now: float) -> ChartData:
    """The charts' figures as of `now` (on the dashboard's thread)."""
    bounds = day_starts(MONTH_DAYS, now)
    bounds[-1] = min(bounds[-1], now)
    days = reader.daily_totals(bounds)
    return ChartData(
        bounds=bounds,
        hours=[_shown({u: t.gpu_seconds / 3600 for u, t in day.items()}) for day in days],
        kwh=[_shown({u: t.all_joules / JOULES_PER_KWH for u, t in day.items()}) for day in days],
        waits=reader.waiting_counts(now - WEEK, WAIT_BOUNDS),
        held=reader.gpu_spans(now - DAY, now),
    )


def _shown(values: dict[str, float]) -> dict[str, float]:
    """A day's figures without the users who had none of that figure."""
    return {user: value for user, value in values.items() if value > 1e-9}
