"""Immutable data: the node (GPUs, links, live state) and leases (who holds what, and when).

Nothing here does I/O or keeps state; every other package passes these values around.
"""

from __future__ import annotations

from gpuallocd.model.admin import AdminAction, AdminActionKind, Drain
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
from gpuallocd.model.power import PowerReading
from gpuallocd.model.preemption import (
    Preemption,
    PreemptionState,
    PreemptTerms,
    PreemptTrigger,
)
from gpuallocd.model.reservation import (
    AdvanceReservation,
    ReservationEvent,
    ReservationRecord,
    ReservationState,
)
from gpuallocd.model.usage import (
    MAX_DAYS,
    LeaseSpan,
    UserUsage,
    day_bounds,
    local_midnights,
)

__all__ = [
    "HEALTHY",
    "MAX_DAYS",
    "NO_LINK",
    "AdminAction",
    "AdminActionKind",
    "AdvanceReservation",
    "Caller",
    "Drain",
    "Gpu",
    "GpuProcess",
    "HistoryEvent",
    "Lease",
    "LeaseEvent",
    "LeaseSpan",
    "LeaseState",
    "LeasedGpu",
    "Link",
    "LiveState",
    "MigDevice",
    "PcieLevel",
    "PowerReading",
    "PreemptTerms",
    "PreemptTrigger",
    "Preemption",
    "PreemptionState",
    "ReservationEvent",
    "ReservationRecord",
    "ReservationState",
    "Topology",
    "UnitKind",
    "UserUsage",
    "day_bounds",
    "lease_gpu_weight",
    "local_midnights",
    "pair_key",
]
