"""The façade's part for the GPUs themselves: what each shows, drains, root's release, and
a rediscovered topology. `AllocatorFacade.gpus` is the one instance."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from gpuallocd.allocator.desks.gpu_admin import GpuAdmin
from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import GpuStatus, NodeView
from gpuallocd.allocator.queue.advance import held_for_status
from gpuallocd.allocator.queue.waiting import WaitQueue
from gpuallocd.allocator.site.drain import DrainBoard
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.site.reservation_board import ReservationBoard
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.model import Caller, Topology

__all__ = ["GpuDesk"]

log = logging.getLogger(__name__)


class GpuDesk:
    """GPU status, drain and undrain, release, and a new topology; each in the worker."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        worker: SerialWorker,
        queue: WaitQueue,
        clock: Callable[[], float],
        *,
        node: NodeView,
        quota: Quota,
        drains: DrainBoard,
        reservations: ReservationBoard,
    ) -> None:
        """The parts drains and root's release change (gpu_admin.py); `reservations`: the
        board whose running reservations `status` shows as holds."""
        self._lifecycle = lifecycle
        self._admin = GpuAdmin(lifecycle, node=node, drains=drains, quota=quota)
        self._board = reservations
        self._worker = worker
        self._queue = queue
        self._clock = clock

    async def gpu_status(self) -> list[GpuStatus]:
        """Every GPU; free ones held for a waiter or a reservation show as reserved."""
        return await self._worker.run(self.gpu_status_now)

    def gpu_status_now(self) -> list[GpuStatus]:
        """`gpu_status`, for a caller already in the worker."""
        held = held_for_status(self._board, self._clock())
        return self._lifecycle.gpu_status({**self._queue.holds(), **held})

    async def drain(
        self, caller: Caller, refs: Sequence[str | int], reason: str
    ) -> list[GpuStatus]:
        return await self._worker.run(self._admin.drain, caller, refs, reason, self._clock())

    async def undrain(self, caller: Caller, refs: Sequence[str | int]) -> list[GpuStatus]:
        statuses = await self._worker.run(self._admin.undrain, caller, refs, self._clock())
        self._queue.kick()
        return statuses

    async def release_gpu(self, caller: Caller, ref: str | int) -> GpuStatus:
        """Root's override for a GPU its former holder's processes keep draining."""
        status = await self._worker.run(self._admin.release, caller, ref)
        self._queue.kick()
        return status

    async def adopt_topology(self, topology: Topology) -> Topology:
        """Take a rediscovered topology; GPUs that came back may serve the queue. Leases of
        MIG instances that vanished end (revoked, with the reason in their history)."""
        ended = await self._worker.run(self._lifecycle.set_topology, topology)
        for lease in ended:
            log.warning(
                "lease %s of %s ended: its MIG instance vanished", lease.id, lease.owner_name
            )
        self._queue.kick()
        return self._lifecycle.topology
