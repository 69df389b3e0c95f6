"""Immutable data: the node (GPUs, links, live state) and leases (who holds what, and when).

Nothing here does I/O or keeps state; every other package passes these values around.
"""

from __future__ import annotations

from gpuallocd.model.lease import (
    Caller,
    HistoryEvent,
    Lease,
    LeasedGpu,
    LeaseEvent,
    LeaseState,
    UnitKind,
    lease_gpu_weight,
)
from gpuallocd.model.node import (
    HEALTHY,
    NO_LINK,
    Gpu,
    GpuProcess,
    Link,
    LiveState,
    MigDevice,
    PcieLevel,
    Topology,
    pair_key,
)

__all__ = [
    "HEALTHY",
    "NO_LINK",
    "Caller",
    "Gpu",
    "GpuProcess",
    "HistoryEvent",
    "Lease",
    "LeaseEvent",
    "LeaseState",
    "LeasedGpu",
    "Link",
    "LiveState",
    "MigDevice",
    "PcieLevel",
    "Topology",
    "UnitKind",
    "lease_gpu_weight",
    "pair_key",
]
