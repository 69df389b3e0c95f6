"""Errors the daemon reports, one class per stable wire code, plus the client's own.

GpuallocError
├── DaemonUnavailable   daemon_unavailable: no daemon answers on the socket
├── ProtocolError       protocol_error: the answer is not what the API promises
├── LeaseRevoked        lease_revoked: raised in the main thread by on_revoke="raise"
├── GpuUnhealthy        gpu_unhealthy: raised in the main thread by on_unhealthy="raise"
├── CallerError         the request is wrong (InvalidRequest, UnknownLease, PermissionDenied, ...)
├── CapacityError       nothing fits now, may later (GpusUnavailable, GpuBusy)
└── BackendError        the node or the daemon failed (NvmlError, LedgerError, ...)

Below CallerError, CapacityError and BackendError the tree is the daemon's own
(`gpuallocd.errors`): the same class names, codes and parents, which a test holds.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BackendError",
    "BodyTooLarge",
    "CallerError",
    "CapacityError",
    "CountExceedsNode",
    "DaemonUnavailable",
    "GpuBusy",
    "GpuUnhealthy",
    "GpuallocError",
    "GpusUnavailable",
    "InternalError",
    "InvalidRequest",
    "InventoryError",
    "LeaseNotActive",
    "LeaseRevoked",
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
    "WithinMinimumRuntime",
    "WouldWaitForever",
    "error_from_envelope",
]


class GpuallocError(Exception):
    """An error from gpuallocd or from talking to it."""

    code = "internal_error"

    def __init__(self, message: str, *, status: int | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.details = details or {}


class DaemonUnavailable(GpuallocError):
    """Nothing answered. `reached` is False when no daemon accepted the connection at all
    (no socket, refused, not permitted), True when one went away during the request.
    `denied` is True when the socket is there but its mode and group keep the caller out."""

    code = "daemon_unavailable"
    reached = True
    denied = False


class ProtocolError(GpuallocError):
    code = "protocol_error"


class LeaseRevoked(GpuallocError):
    """The lease was revoked or expired under its holder (on_revoke="raise")."""

    code = "lease_revoked"

    def __init__(
        self,
        message: str = "the GPU lease was revoked or expired",
        *,
        status: int | None = None,
        details: Any = None,
    ) -> None:
        super().__init__(message, status=status, details=details)


class GpuUnhealthy(GpuallocError):
    """A GPU of the lease failed (an Xid, a GPU that cannot be read) (on_unhealthy="raise")."""

    code = "gpu_unhealthy"

    def __init__(
        self,
        message: str = "a GPU of the lease is unhealthy",
        *,
        status: int | None = None,
        details: Any = None,
    ) -> None:
        super().__init__(message, status=status, details=details)


class CallerError(GpuallocError):
    """The request is wrong; the caller must change it."""

    code = "invalid_request"


class CapacityError(GpuallocError):
    """Nothing fits right now; the same request may succeed later."""

    code = "gpus_unavailable"


class BackendError(GpuallocError):
    """The node or the daemon failed, not the caller."""

    code = "internal_error"


class InvalidRequest(CallerError):
    code = "invalid_request"


class MalformedJson(InvalidRequest):
    code = "malformed_json"


class MalformedHttp(InvalidRequest):
    code = "malformed_http"


class BodyTooLarge(InvalidRequest):
    code = "body_too_large"


class CountExceedsNode(InvalidRequest):
    code = "count_exceeds_node"


class UnknownGpu(CallerError):
    code = "unknown_gpu"


class UnknownLease(CallerError):
    code = "unknown_lease"


class UnknownPolicy(CallerError):
    code = "unknown_policy"


class UnknownRoute(CallerError):
    code = "unknown_route"


class UnknownReservation(CallerError):
    code = "unknown_reservation"


class MethodNotAllowed(CallerError):
    code = "method_not_allowed"


class PermissionDenied(CallerError):
    code = "permission_denied"


class LeaseNotActive(CallerError):
    code = "lease_not_active"


class PolicyNotApplicable(CallerError):
    code = "policy_not_applicable"


class QuotaExceeded(CallerError):
    """Over a limit of the site: `details` has `limit`, `value` and `current` (and for a
    budget `frees_at`, when enough of the use leaves its window)."""

    code = "quota_exceeded"


class WouldWaitForever(CallerError):
    code = "would_wait_forever"


class OverPowerBudget(CallerError):
    """More than the power budget even on an idle box: `details` has
    `fitting_power_limit_watts`, the cap per GPU that fits (null where none does)."""

    code = "over_power_budget"


class NotPreemptible(CallerError):
    code = "not_preemptible"


class WithinMinimumRuntime(CallerError):
    """An admin's preemption before the lease's minimum runtime: `details` has
    `preemptible_at` (Unix time)."""

    code = "within_minimum_runtime"


class GpusUnavailable(CapacityError):
    code = "gpus_unavailable"


class GpuBusy(CapacityError):
    code = "gpu_busy"


class ReservationConflict(CapacityError):
    """The lease would overlap a reservation: `details` has `reservation`, `starts_at`, and
    `max_ttl_seconds` (the longest TTL that ends before it starts, where it has not)."""

    code = "reservation_conflict"


class NvmlError(BackendError):
    code = "nvml_error"


class InventoryError(BackendError):
    code = "inventory_error"


class LedgerError(BackendError):
    code = "ledger_error"


class InternalError(BackendError):
    code = "internal_error"


_GROUPS = (GpuallocError, CallerError, CapacityError, BackendError)


def _all_classes() -> dict[str, type[GpuallocError]]:
    found: dict[str, type[GpuallocError]] = {}
    pending: list[type[GpuallocError]] = [GpuallocError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls not in _GROUPS:
            found[cls.code] = cls
    return found


ERROR_CLASSES = _all_classes()


def error_from_envelope(status: int, body: Any) -> GpuallocError:
    """The exception for an error answer: the class of its code, else the base class."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return ProtocolError(f"HTTP {status} without an error envelope", status=status)
    code = str(error.get("code", "internal_error"))
    cls = ERROR_CLASSES.get(code, GpuallocError)
    exc = cls(str(error.get("message", code)), status=status, details=error.get("details"))
    exc.code = code
    return exc
