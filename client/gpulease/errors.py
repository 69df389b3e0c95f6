"""Errors the daemon reports, one class per stable wire code, plus the client's own.

GpuallocError
├── DaemonUnavailable   daemon_unavailable: no daemon answers on the socket
├── ProtocolError       protocol_error: the answer is not what the API promises
├── LeaseRevoked        lease_revoked: raised in the main thread by on_revoke="raise"
└── one class per server code (InvalidRequest, GpusUnavailable, UnknownLease, ...)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BodyTooLarge",
    "CountExceedsNode",
    "DaemonUnavailable",
    "GpuBusy",
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
    "NvmlError",
    "PermissionDenied",
    "PolicyNotApplicable",
    "ProtocolError",
    "UnknownGpu",
    "UnknownLease",
    "UnknownPolicy",
    "UnknownRoute",
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
    code = "daemon_unavailable"


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


class InvalidRequest(GpuallocError):
    code = "invalid_request"


class MalformedJson(InvalidRequest):
    code = "malformed_json"


class MalformedHttp(InvalidRequest):
    code = "malformed_http"


class BodyTooLarge(InvalidRequest):
    code = "body_too_large"


class CountExceedsNode(InvalidRequest):
    code = "count_exceeds_node"


class UnknownGpu(GpuallocError):
    code = "unknown_gpu"


class UnknownLease(GpuallocError):
    code = "unknown_lease"


class UnknownPolicy(GpuallocError):
    code = "unknown_policy"


class UnknownRoute(GpuallocError):
    code = "unknown_route"


class MethodNotAllowed(GpuallocError):
    code = "method_not_allowed"


class PermissionDenied(GpuallocError):
    code = "permission_denied"


class LeaseNotActive(GpuallocError):
    code = "lease_not_active"


class PolicyNotApplicable(GpuallocError):
    code = "policy_not_applicable"


class GpusUnavailable(GpuallocError):
    code = "gpus_unavailable"


class GpuBusy(GpusUnavailable):
    code = "gpu_busy"


class NvmlError(GpuallocError):
    code = "nvml_error"


class InventoryError(GpuallocError):
    code = "inventory_error"


class LedgerError(GpuallocError):
    code = "ledger_error"


class InternalError(GpuallocError):
    code = "internal_error"


def _all_classes() -> dict[str, type[GpuallocError]]:
    found: dict[str, type[GpuallocError]] = {}
    pending: list[type[GpuallocError]] = [GpuallocError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls is not GpuallocError:
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
