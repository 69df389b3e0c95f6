"""The node as an advance reservation's window will find it: what runs on the GPUs now (use
without a lease, memory in use, load) is gone by then; only health, the leases due to run
past the start and the reservations of the window stay. Pure: a snapshot in, one out."""

from __future__ import annotations

import dataclasses

from gpuallocd.model.node import LiveState
from gpuallocd.policies.base import NodeSnapshot

__all__ = ["as_in_window"]


def as_in_window(snapshot: NodeSnapshot) -> NodeSnapshot:
    """`snapshot` (made from the leases that run past the start and the GPUs reserved in the
    window) without what runs now: no GPU is refused, nor ranked, for today's processes."""
    views = {
        uuid: dataclasses.replace(
            view,
            foreign_use=False,
            live=LiveState(healthy=view.live.healthy, health_reason=view.live.health_reason),
        )
        for uuid, view in snapshot.views.items()
    }
    return dataclasses.replace(snapshot, views=views)
