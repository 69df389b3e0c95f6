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
    │   ├── UnknownReservation    404   unknown_reservation
    │   ├── PermissionDenied      403   permission_denied
    │   ├── LeaseNotActive        409   lease_not_active: freed, expired or revoked already
    │   ├── QuotaExceeded         403   quota_exceeded: over a limit of the site (docs/limits.md)
    │   ├── PolicyNotApplicable   422   policy_not_applicable: the policy cannot serve this node
    │   ├── WouldWaitForever      409   would_wait_forever: the caller's own leases block the wait
    │   ├── OverPowerBudget       409   over_power_budget: it would pass the power budget even idle
    │   ├── NotPreemptible        409   not_preemptible: the lease was not granted preemptible
    │   └── WithinMinimumRuntime  409   within_minimum_runtime: its minimum runtime has not passed
    ├── CapacityError            409    nothing fits right now; may succeed later
    │   ├── GpusUnavailable       409   gpus_unavailable: not enough free GPUs
    │   ├── GpuBusy               409   gpu_busy: a GPU asked for by name is leased or unhealthy
    │   └── ReservationConflict   409   reservation_conflict: the lease would overlap a reservation
    └── BackendError             5xx    the node or the daemon failed, not the caller
        ├── NvmlError             503   nvml_error
        ├── InventoryError        503   inventory_error: topology file or discovery failed
        ├── LedgerError           503   ledger_error
        └── InternalError         500   internal_error

    LocalError                          never on the wire: raised and handled on this machine
    ├── StartupError              exit  the daemon cannot start; exit codes: docs/configuration.md
    │   ├── ConfigError            78   a setting in the file, the environment or an option is wrong
    │   ├── AlreadyRunning         75   another daemon holds the state directory or the socket
    │   ├── HardwareUnavailable    69   the GPU backend or topology file cannot be opened
    │   ├── StateUnusable          73   the state directory, ledger or socket cannot be used
    │   │   ├── LedgerDamaged      65   the ledger fails SQLite's check: run gpuallocd --recover
    │   │   └── LedgerTooNew       65   a newer gpuallocd wrote the ledger: the way back is named
    │   └── MissingPrivilege       77   an enabled feature lacks a capability or a writable path
    └── InputFileError                  a file named on the command line cannot be used
        └── TraceError                  a `simulate` trace line that cannot be replayed

Codes are part of the API: they are never renamed. The client package maps each code back
to an exception class of the same name, under the same parents. Each code carries the same
detail keys wherever it is raised: `detail_keys` lists them, and raising with another key is a
bug that the constructor reports at once. Foreign errors (SQLAlchemy, NVML, amdsmi) are
translated at one boundary per dependency and chained (`raise ... from exc`), so the daemon's
log keeps their cause.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AlreadyRunning",
    "BackendError",
    "BodyTooLarge",
    "CallerError",
    "CapacityError",
    "ConfigError",
    "CountExceedsNode",
    "GpuBusy",
    "GpuallocError",
    "GpusUnavailable",
    "HardwareUnavailable",
    "InputFileError",
    "InternalError",
    "InvalidRequest",
    "InventoryError",
    "LeaseNotActive",
    "LedgerDamaged",
    "LedgerError",
    "LedgerTooNew",
    "LocalError",
    "MalformedHttp",
    "MalformedJson",
    "MethodNotAllowed",
    "MissingPrivilege",
    "NotPreemptible",
    "NvmlError",
    "OverPowerBudget",
    "PermissionDenied",
    "PolicyNotApplicable",
    "QuotaExceeded",
    "ReservationConflict",
    "StartupError",
    "StateUnusable",
    "TraceError",
    "UnknownGpu",
    "UnknownLease",
    "UnknownPolicy",
    "UnknownReservation",
    "UnknownRoute",
    "WithinMinimumRuntime",
    "WouldWaitForever",
    "error_classes",
]


class GpuallocError(Exception):
    """Base of every error gpuallocd raises on purpose."""

    code: ClassVar[str] = "internal_error"
    http_status: ClassVar[int] = 500
    detail_keys: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, message: str, **details: Any) -> None:
        unknown = set(details) - self.detail_keys
        if unknown:
            raise TypeError(f"{type(self).__name__} takes no detail {', '.join(sorted(unknown))}")
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
    detail_keys = frozenset({"field", "fields", "value"})


class MalformedJson(InvalidRequest):
    code = "malformed_json"


class MalformedHttp(InvalidRequest):
    code = "malformed_http"


class BodyTooLarge(InvalidRequest):
    code = "body_too_large"
    http_status = 413


class CountExceedsNode(InvalidRequest):
    code = "count_exceeds_node"
    detail_keys = frozenset({"count", "node_gpus"})


class UnknownGpu(CallerError):
    code = "unknown_gpu"
    http_status = 404
    detail_keys = frozenset({"gpu"})


class UnknownLease(CallerError):
    code = "unknown_lease"
    http_status = 404
    detail_keys = frozenset({"lease"})


class UnknownPolicy(CallerError):
    code = "unknown_policy"
    http_status = 400
    detail_keys = frozenset({"policy"})


class UnknownRoute(CallerError):
    code = "unknown_route"
    http_status = 404


class UnknownReservation(CallerError):
    code = "unknown_reservation"
    http_status = 404
    detail_keys = frozenset({"reservation"})


class MethodNotAllowed(CallerError):
    code = "method_not_allowed"
    http_status = 405


class PermissionDenied(CallerError):
    code = "permission_denied"
    http_status = 403
    detail_keys = frozenset({"lease"})


class LeaseNotActive(CallerError):
    code = "lease_not_active"
    http_status = 409
    detail_keys = frozenset({"lease", "state"})


class PolicyNotApplicable(CallerError):
    code = "policy_not_applicable"
    http_status = 422
    detail_keys = frozenset({"policy", "count"})


class QuotaExceeded(CallerError):
    """Granting the request would pass one of the caller's limits (`limit`, its `value`, the
    caller's `current` use; for `max_ttl_seconds`, `current` is the TTL asked for; for a
    budget, `frees_at`: when enough of the use leaves its window)."""

    code = "quota_exceeded"
    http_status = 403
    detail_keys = frozenset({"limit", "value", "current", "frees_at"})


class WouldWaitForever(CallerError):
    """A wait that only the caller's own leases keep from being served: refused at once."""

    code = "would_wait_forever"
    http_status = 409
    detail_keys = frozenset({"count", "held"})


class OverPowerBudget(CallerError):
    """A request that would commit more than the power budget even on an idle box (nothing
    leased, every other GPU at its idle draw): no wait could serve it, so it is refused at
    once; `fitting_power_limit_watts` is the cap per GPU that would fit, where one does."""

    code = "over_power_budget"
    http_status = 409
    detail_keys = frozenset(
        {"count", "budget_watts", "committed_watts", "fitting_power_limit_watts"}
    )


class NotPreemptible(CallerError):
    """A preemption or a checkpoint of a lease that was not granted preemptible (a revoke ends
    any lease)."""

    code = "not_preemptible"
    http_status = 409
    detail_keys = frozenset({"lease"})


class WithinMinimumRuntime(CallerError):
    """An admin's preemption of a lease before its minimum runtime has passed: it may be
    preempted from `preemptible_at` (Unix time)."""

    code = "within_minimum_runtime"
    http_status = 409
    detail_keys = frozenset({"lease", "preemptible_at"})


class CapacityError(GpuallocError):
    """Nothing fits right now; the same request may succeed later."""

    code = "gpus_unavailable"
    http_status = 409


class GpusUnavailable(CapacityError):
    code = "gpus_unavailable"
    detail_keys = frozenset({"count", "available", "waited_seconds"})


class GpuBusy(CapacityError):
    """A GPU asked for is not free. `quoted`: the words of other users the message quotes
    (a drain's reason), each with who wrote them, so that a reader who must not take them
    as its own (an agent) can withhold them."""

    code = "gpu_busy"
    detail_keys = frozenset({"gpus", "quoted"})


class ReservationConflict(CapacityError):
    """The GPUs this request could use are reserved (docs/scheduling.md): by a reservation
    that holds them now, or one that starts before a lease of this TTL would end. A shorter
    TTL (at most `max_ttl_seconds`, when the reservation has not started) or other GPUs fit;
    a request that waits is served once it no longer overlaps. `quoted`: the reservation's
    reason where the message quotes it, with who wrote it (as GpuBusy's)."""

    code = "reservation_conflict"
    detail_keys = frozenset(
        {"reservation", "gpus", "starts_at", "ends_at", "max_ttl_seconds", "quoted"}
    )


class BackendError(GpuallocError):
    """The node or the daemon failed, not the caller."""

    code = "internal_error"
    http_status = 500


class NvmlError(BackendError):
    code = "nvml_error"
    http_status = 503
    detail_keys = frozenset({"nvml_code", "nvml_call"})


class InventoryError(BackendError):
    code = "inventory_error"
    http_status = 503
    detail_keys = frozenset({"amdsmi_code", "amdsmi_call", "path", "line"})


class LedgerError(BackendError):
    code = "ledger_error"
    http_status = 503


class InternalError(BackendError):
    code = "internal_error"
    http_status = 500
    detail_keys = frozenset({"gpus"})


class LocalError(GpuallocError):
    """Raised and handled on this machine; never sent on the wire."""


class StartupError(LocalError):
    """The daemon cannot start. `exit_code` is what `gpuallocd` exits with."""

    exit_code: ClassVar[int] = 1


class ConfigError(StartupError):
    """A setting in the config file, the environment or an option is wrong."""

    exit_code = 78  # EX_CONFIG


class AlreadyRunning(StartupError):
    """Another daemon holds the state directory, or serves on the socket."""

    exit_code = 75  # EX_TEMPFAIL: systemd may try again once the other one is gone


class HardwareUnavailable(StartupError):
    """The GPU backend (NVML, amdsmi) or the topology file cannot be opened."""

    exit_code = 69  # EX_UNAVAILABLE


class StateUnusable(StartupError):
    """The state directory, the ledger or the socket's directory cannot be used."""

    exit_code = 73  # EX_CANTCREAT


class LedgerDamaged(StateUnusable):
    """The ledger fails SQLite's integrity check (or cannot be read): serving from it could
    grant a GPU twice. `gpuallocd --recover` rebuilds it (docs/recovery.md)."""

    exit_code = 65  # EX_DATAERR: restarting will not help


class LedgerTooNew(StateUnusable):
    """The ledger has a higher schema version than this gpuallocd reads (a newer one wrote
    it): serving from it would drop what it does not know. The line names both versions and
    the way back, the backup taken before the upgrade (docs/recovery.md)."""

    exit_code = 65  # EX_DATAERR: restarting will not help


class MissingPrivilege(StartupError):
    """A feature the config enables cannot work with what the daemon may do (a capability
    its unit does not grant, a path it may not write)."""

    exit_code = 77  # EX_NOPERM


class InputFileError(LocalError):
    """A file named on the command line cannot be used."""


class TraceError(InputFileError):
    """A `simulate` trace line that cannot be replayed; `line` is its number (from 1)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"trace line {line}: {message}")
        self.line = line


_ABSTRACT = frozenset({"GpuallocError", "CallerError", "CapacityError", "BackendError"})


def error_classes() -> dict[str, type[GpuallocError]]:
    """Every concrete error class that travels on the wire, by its code."""
    found: dict[str, type[GpuallocError]] = {}
    pending: list[type[GpuallocError]] = [GpuallocError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if issubclass(cls, LocalError):
            continue
        if cls.__module__ == __name__ and cls.__name__ not in _ABSTRACT:
            found[cls.code] = cls
    return found
