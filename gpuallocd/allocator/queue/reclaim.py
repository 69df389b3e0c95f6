"""Idle reclaim: after each live sample, take back one idle lease that someone waits for.

Opt-in (`idle_reclaim_minutes`). The tracker (`idle.py`) decides from the samples; this runs
its decisions through the serial worker like any allocator call, and wakes the queue after.
One lease per sample, the longest idle first, so no more is taken than the queue still wants.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import NodeView
from gpuallocd.allocator.queue.waiting import WaitQueue
from gpuallocd.allocator.site.idle import IdleRules, IdleTracker
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.model import Lease

__all__ = ["IdleReclaimer"]

log = logging.getLogger(__name__)


class IdleReclaimer:
    """Feeds samples to the idle tracker and revokes what it names."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        worker: SerialWorker,
        queue: WaitQueue,
        rules: IdleRules,
        clock: Callable[[], float],
        *,
        node: NodeView,
    ) -> None:
        """`node`: the view whose live state says which leases are idle."""
        self._lifecycle = lifecycle
        self._node = node
        self._worker = worker
        self._queue = queue
        self._clock = clock
        self.tracker = IdleTracker(rules)

    def notice(self, lease_id: str) -> dict[str, float] | None:
        """What to tell the holder of `lease_id` when it is idle past the reclaim time."""
        found = self.tracker.notice(lease_id, self._clock())
        return found.to_json() if found else None

    async def after_sample(self) -> Lease | None:
        """A new sample was adopted: update idle times, reclaim one lease if one is due."""
        if not self.tracker.rules.enabled:
            return None
        lease = await self._worker.run(self._reclaim_one, self._queue.wanted_gpus())
        if lease is not None:
            log.info(
                "lease %s of %s reclaimed: idle while others waited", lease.id, lease.owner_name
            )
            self._queue.kick()
        return lease

    def _reclaim_one(self, wanted: frozenset[str]) -> Lease | None:
        now = self._clock()
        leases = self._lifecycle.leases()
        self.tracker.observe(leases, self._node.live, now)
        victim = self.tracker.victim(leases, wanted, now)
        if victim is None:
            return None
        since = self.tracker.idle_since(victim.id) or now
        detail = (
            f"idle reclaim: no process and 0% utilisation on its GPUs for "
            f"{(now - since) / 60:.0f} min while others waited"
        )
        return self._lifecycle.reclaim_idle(victim.id, detail)
