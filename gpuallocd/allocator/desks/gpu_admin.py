"""What admins do to GPUs rather than leases: drain, undrain, and root's release of a GPU
that its former holder's processes keep draining. Each runs in the serial worker, like any
lifecycle call, and answers with the statuses of the GPUs it touched."""

from __future__ import annotations

from collections.abc import Sequence

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import GpuStatus
from gpuallocd.errors import PermissionDenied
from gpuallocd.model import Caller

__all__ = ["drain", "release", "undrain"]


def _statuses(lifecycle: LeaseLifecycle, uuids: Sequence[str]) -> list[GpuStatus]:
    return [s for s in lifecycle.gpu_status() if s.gpu.uuid in uuids]


def drain(
    lifecycle: LeaseLifecycle, caller: Caller, refs: Sequence[str | int], reason: str, now: float
) -> list[GpuStatus]:
    """Take GPUs out of service (admins): no new lease; leases on them run to their end."""
    lifecycle.quota.rules.require_admin(caller, "drain GPUs")
    uuids = lifecycle.topology.resolve_all(refs)
    lifecycle.drains.drain(uuids, caller, reason, now)
    return _statuses(lifecycle, uuids)


def undrain(
    lifecycle: LeaseLifecycle, caller: Caller, refs: Sequence[str | int], now: float
) -> list[GpuStatus]:
    """Put drained GPUs back in service (admins)."""
    lifecycle.quota.rules.require_admin(caller, "undrain GPUs")
    uuids = lifecycle.topology.resolve_all(refs)
    lifecycle.drains.undrain(uuids, caller, now)
    return _statuses(lifecycle, uuids)


def release(lifecycle: LeaseLifecycle, caller: Caller, ref: str | int) -> GpuStatus:
    """Root declares a draining or in-use GPU free: its present processes are ignored."""
    if not caller.is_root:
        raise PermissionDenied("only root may release a GPU")
    uuid = lifecycle.topology.resolve(ref)
    lifecycle.node.ignore_present_processes(uuid)
    return _statuses(lifecycle, [uuid])[0]
