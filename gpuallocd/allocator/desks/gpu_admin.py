"""What admins do to GPUs rather than leases: drain, undrain, and root's release of a GPU
that its former holder's processes keep draining. Each runs in the serial worker, like any
lifecycle call, and answers with the statuses of the GPUs it touched."""

from __future__ import annotations

from collections.abc import Sequence

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import GpuStatus, NodeView
from gpuallocd.allocator.site.drain import DrainBoard
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.errors import PermissionDenied
from gpuallocd.model import Caller

__all__ = ["GpuAdmin"]


class GpuAdmin:
    """Drains and root's release over the parts they change: the drains' board, the node's
    view (what it ignores), and the quota's admin groups (who may)."""

    def __init__(
        self, lifecycle: LeaseLifecycle, *, node: NodeView, drains: DrainBoard, quota: Quota
    ) -> None:
        self._lifecycle = lifecycle
        self._node = node
        self._drains = drains
        self._quota = quota

    def _statuses(self, uuids: Sequence[str]) -> list[GpuStatus]:
        return [s for s in self._lifecycle.gpu_status() if s.gpu.uuid in uuids]

    def drain(
        self, caller: Caller, refs: Sequence[str | int], reason: str, now: float
    ) -> list[GpuStatus]:
        """Take GPUs out of service (admins): no new lease; leases on them run to their end."""
        self._quota.require_admin(caller, "drain GPUs")
        uuids = self._node.topology.resolve_all(refs)
        self._drains.drain(uuids, caller, reason, now)
        return self._statuses(uuids)

    def undrain(self, caller: Caller, refs: Sequence[str | int], now: float) -> list[GpuStatus]:
        """Put drained GPUs back in service (admins)."""
        self._quota.require_admin(caller, "undrain GPUs")
        uuids = self._node.topology.resolve_all(refs)
        self._drains.undrain(uuids, caller, now)
        return self._statuses(uuids)

    def release(self, caller: Caller, ref: str | int) -> GpuStatus:
        """Root declares a draining or in-use GPU free: its present processes are ignored."""
        if not caller.is_root:
            raise PermissionDenied("only root may release a GPU")
        uuid = self._node.topology.resolve(ref)
        self._node.ignore_present_processes(uuid)
        return self._statuses([uuid])[0]
