"""The one exception tree of gpuallocd, and the stable wire codes.

    GpuallocError                       every error the project raises on purpose
    ├── CallerError              4xx    the caller must change the request
    │   ├── InvalidRequest        400   invalid_request: wrong type, range or shape
    │   │   ├── MalformedJson     400   malformed_json: the body is not JSON
    │   │   ├── MalformedHttp     400   malformed_http: not parseable as HTTP/1.1
    │   │   ├── BodyTooLarge      413   body_too_large
    │   │   └── CountExceedsNode  400   count_exceeds_node: more GPUs than the node has
    │   ├── UnknownGpu            404   unknown_gpu
    │   ├── UnknownLease          404   unknown_lease
    │   ├── UnknownPolicy         400   unknown_policy
    │   ├── UnknownRoute          404   unknown_route
    │   ├── MethodNotAllowed      405   method_not_allowed
    │   ├── PermissionDenied      403   permission_denied
    │   ├── LeaseNotActive        409   lease_not_active: freed, expired or revoked already
    │   └── PolicyNotApplicable   422   policy_not_applicable: the policy cannot serve this node
    ├── CapacityError            409    nothing fits right now; may succeed later
    │   ├── GpusUnavailable       409   gpus_unavailable: not enough free GPUs
    │   └── GpuBusy               409   gpu_busy: a GPU asked for by name is leased or unhealthy
    └── BackendError             5xx    the node or the daemon failed, not the caller
        ├── NvmlError             503   nvml_error
        ├── InventoryError        503   inventory_error: topology file or discovery failed
        ├── LedgerError           503   ledger_error
        └── InternalError         500   internal_error

Codes are part of the API: they are never renamed. The client package maps each code back
to an exception class of the same name.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "BackendError",
    "BodyTooLarge",
    "CallerError",
    "CapacityError",
    "CountExceedsNode",
    "GpuBusy",
    "GpuallocError",
    "GpusUnavailable",
    "InternalError",
    "InvalidRequest",
    "InventoryError",
    "LeaseNotActive",
    "LedgerError",
    "MalformedHttp",
    "MalformedJson",
    "MethodNotAllowed",
    "NvmlError",
    "PermissionDenied",
    "PolicyNotApplicable",
    "UnknownGpu",
    "UnknownLease",
    "UnknownPolicy",
    "UnknownRoute",
    "error_classes",
]


class GpuallocError(Exception):
    """Base of every error gpuallocd raises on purpose."""

    code: ClassVar[str] = "internal_error"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_envelope(self) -> dict[str, Any]:
        """The JSON error envelope sent on the wire."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return {"error": body}


class CallerError(GpuallocError):
    """The request is wrong; the caller must change it."""

    code = "invalid_request"
    http_status = 400


class InvalidRequest(CallerError):
    code = "invalid_request"
    http_status = 400


class MalformedJson(InvalidRequest):
    code = "malformed_json"


class MalformedHttp(InvalidRequest):
    code = "malformed_http"


class BodyTooLarge(InvalidRequest):
    code = "body_too_large"
    http_status = 413


class CountExceedsNode(InvalidRequest):
    code = "count_exceeds_node"


class UnknownGpu(CallerError):
    code = "unknown_gpu"
    http_status = 404


class UnknownLease(CallerError):
    code = "unknown_lease"
    http_status = 404


class UnknownPolicy(CallerError):
    code = "unknown_policy"
    http_status = 400


class UnknownRoute(CallerError):
    code = "unknown_route"
    http_status = 404


class MethodNotAllowed(CallerError):
    code = "method_not_allowed"
    http_status = 405


class PermissionDenied(CallerError):
    code = "permission_denied"
    http_status = 403


class LeaseNotActive(CallerError):
    code = "lease_not_active"
    http_status = 409


class PolicyNotApplicable(CallerError):
    code = "policy_not_applicable"
    http_status = 422


class CapacityError(GpuallocError):
    """Nothing fits right now; the same request may succeed later."""

    code = "gpus_unavailable"
    http_status = 409


class GpusUnavailable(CapacityError):
    code = "gpus_unavailable"


class GpuBusy(CapacityError):
    code = "gpu_busy"


class BackendError(GpuallocError):
    """The node or the daemon failed, not the caller."""

    code = "internal_error"
    http_status = 500


class NvmlError(BackendError):
    code = "nvml_error"
    http_status = 503


class InventoryError(BackendError):
    code = "inventory_error"
    http_status = 503


class LedgerError(BackendError):
    code = "ledger_error"
    http_status = 503


class InternalError(BackendError):
    code = "internal_error"
    http_status = 500


def error_classes() -> dict[str, type[GpuallocError]]:
    """Every concrete error class by its wire code (the most specific class per code)."""
    found: dict[str, type[GpuallocError]] = {}
    pending: list[type[GpuallocError]] = [GpuallocError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__ == __name__ and cls.__name__ not in {
            "GpuallocError",
            "CallerError",
            "CapacityError",
            "BackendError",
        }:
            found[cls.code] = cls
    return found
