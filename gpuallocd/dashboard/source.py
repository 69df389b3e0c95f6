"""What a page shows of the node now, read through the allocator's façade like `status`.

These reads are of the allocator's in-memory view (no ledger query) and take microseconds;
everything slower (the ledger, the HTML and the charts) is done on the dashboard's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuallocd.allocator import AllocatorFacade

__all__ = ["NodeNow", "read_node"]


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
    return NodeNow(
        now=clock(),
        name=facade.topology.name,
        gpus=[status.to_json() | facade.preemption.marks(status.lease) for status in statuses],
        labels={lease.id: lease.label for lease in leases},
        queue=queue,
        reservations=reservations,
        unleased=facade.unleased.offenders(),
        power=power,
    )
