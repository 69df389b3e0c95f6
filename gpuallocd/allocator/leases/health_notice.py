"""Holder-aware health: a health failure (an Xid, a GPU that cannot be read) on a leased GPU
is told to the lease's holder once, as an `unhealthy` event in the lease's history, which
`gpuallocctl run` prints and `gpu_lease` hears at its next renewal. The GPU itself is granted
to nobody while it is unhealthy; an Xid's mark stays until root clears it (`rescan`)."""

from __future__ import annotations

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import NodeView
from gpuallocd.model import Lease, LeaseEvent

__all__ = ["HealthNotices"]


class HealthNotices:
    """Tells each lease once per failure of one of its GPUs."""

    def __init__(self, lifecycle: LeaseLifecycle, *, node: NodeView) -> None:
        """`node`: the view whose live state says which GPUs are unhealthy."""
        self._lifecycle = lifecycle
        self._node = node
        self._told: set[tuple[str, str]] = set()  # (lease id, GPU UUID)

    def unhealthy(self, lease: Lease) -> list[dict[str, object]]:
        """The lease's GPUs that are unhealthy now, each with its index and the reason."""
        found: dict[str, dict[str, object]] = {}
        for unit in lease.gpus:
            live = self._node.live(unit.gpu_uuid)
            if not live.healthy:
                reason = live.health_reason or "unhealthy"
                found[unit.gpu_uuid] = {
                    "uuid": unit.gpu_uuid,
                    "index": unit.index,
                    "reason": reason,
                }
        return list(found.values())

    def check(self) -> list[tuple[Lease, dict[str, object]]]:
        """After a sample: note the failures not told yet (and return them, each with its
        lease); forget those that passed."""
        fresh: list[tuple[Lease, dict[str, object]]] = []
        now: set[tuple[str, str]] = set()
        for lease in self._lifecycle.leases():
            for gpu in self.unhealthy(lease):
                key = (lease.id, str(gpu["uuid"]))
                now.add(key)
                if key not in self._told:
                    detail = f"GPU {gpu['index']} is unhealthy: {gpu['reason']}"
                    self._lifecycle.note(lease.id, LeaseEvent.UNHEALTHY, detail)
                    fresh.append((lease, gpu))
        self._told = now
        return fresh
