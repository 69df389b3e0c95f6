"""Immutable data: the node (GPUs, links, live state) and leases (who holds what, and when).

Nothing here does I/O or keeps state; every other package passes these values around.

The names below are read from their modules when first asked for (PEP 562): a command that
needs one text helper of `model.power` does not pay for every dataclass of the package (the
CLI starts in half the time). Type checkers read the imports under TYPE_CHECKING.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Each name's module: the same names as imported above (tests/test_architecture.py).
_HOMES = {
    "admin": ("AdminAction", "AdminActionKind", "Drain"),
    "lease": (
        "Caller",
        "HistoryEvent",
        "Lease",
        "LeasedGpu",
        "LeaseEvent",
        "LeaseState",
        "UnitKind",
        "lease_gpu_weight",
    ),
    "node": (
        "HEALTHY",
        "NO_LINK",
        "Gpu",
        "GpuProcess",
        "Link",
        "LiveState",
        "MigDevice",
        "PcieLevel",
        "Topology",
        "pair_key",
    ),
    "power": ("PowerReading",),
    "preemption": ("Preemption", "PreemptionState", "PreemptTerms", "PreemptTrigger"),
    "reservation": (
        "AdvanceReservation",
        "ReservationEvent",
        "ReservationRecord",
        "ReservationState",
    ),
    "usage": ("MAX_DAYS", "LeaseSpan", "UserUsage", "day_bounds", "local_midnights"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME_OF])
