"""gpulease: the client of gpuallocd. Standard library only.

from gpulease import gpu_lease

with gpu_lease(2) as lease:
    train()   # CUDA_VISIBLE_DEVICES names the two leased GPUs
"""

from __future__ import annotations

from gpulease.client import Client, GpuRef
from gpulease.errors import (
    BackendError,
    BodyTooLarge,
    CallerError,
    CapacityError,
    CountExceedsNode,
    DaemonUnavailable,
    GpuallocError,
    GpuBusy,
    GpusUnavailable,
    GpuUnhealthy,
    InternalError,
    InvalidRequest,
    InventoryError,
    LeaseNotActive,
    LeaseRevoked,
    LedgerError,
    MalformedHttp,
    MalformedJson,
    MethodNotAllowed,
    NotPreemptible,
    NvmlError,
    OverPowerBudget,
    PermissionDenied,
    PolicyNotApplicable,
    ProtocolError,
    QuotaExceeded,
    ReservationConflict,
    UnknownGpu,
    UnknownLease,
    UnknownPolicy,
    UnknownReservation,
    UnknownRoute,
    WithinMinimumRuntime,
    WouldWaitForever,
)
from gpulease.lease import gpu_lease, visible_devices_env
from gpulease.models import GpuStatus, Lease, LeasedGpu
from gpulease.preemption import HeldLease
from gpulease.sizes import parse_size, parse_watts
from gpulease.transport import DEFAULT_SOCKET, UntrustedServer

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SOCKET",
    "BackendError",
    "BodyTooLarge",
    "CallerError",
    "CapacityError",
    "Client",
    "CountExceedsNode",
    "DaemonUnavailable",
    "GpuBusy",
    "GpuRef",
    "GpuStatus",
    "GpuUnhealthy",
    "GpuallocError",
    "GpusUnavailable",
    "HeldLease",
    "InternalError",
    "InvalidRequest",
    "InventoryError",
    "Lease",
    "LeaseNotActive",
    "LeaseRevoked",
    "LeasedGpu",
    "LedgerError",
    "MalformedHttp",
    "MalformedJson",
    "MethodNotAllowed",
    "NotPreemptible",
    "NvmlError",
    "OverPowerBudget",
    "PermissionDenied",
    "PolicyNotApplicable",
    "ProtocolError",
    "QuotaExceeded",
    "ReservationConflict",
    "UnknownGpu",
    "UnknownLease",
    "UnknownPolicy",
    "UnknownReservation",
    "UnknownRoute",
    "UntrustedServer",
    "WithinMinimumRuntime",
    "WouldWaitForever",
    "__version__",
    "gpu_lease",
    "parse_size",
    "parse_watts",
    "visible_devices_env",
]
