"""`packed` and `spread`: the most or the least used GPUs first (compact-first, low-load-first).

Use is the memory in use (bytes), then the utilisation (percent); an unknown value counts as
no use. Both matter once leases can share a GPU by memory: `packed` fills GPUs that are
already busy and keeps whole GPUs free, `spread` puts work where it competes least.
Ties go to the best topology, then the lowest index.
"""

from __future__ import annotations

from gpuallocd.policies.base import GpuView
from gpuallocd.policies.ranked import RankedPolicy

__all__ = ["PackedPolicy", "SpreadPolicy", "use_of"]


def use_of(view: GpuView) -> tuple[int, float]:
    """(memory used in bytes, utilisation in percent), unknown as 0."""
    return (view.live.memory_used_bytes or 0, view.live.utilization_percent or 0.0)


class PackedPolicy(RankedPolicy):
    """The most used GPUs first, so that whole GPUs stay free for later requests."""

    name = "packed"
    preference = "most used GPUs first (memory in use, then utilisation)"

    @staticmethod
    def rank(view: GpuView) -> tuple[int, float]:
        memory, utilization = use_of(view)
        return (-memory, -utilization)


class SpreadPolicy(RankedPolicy):
    """The least used GPUs first, so that work competes as little as possible."""

    name = "spread"
    preference = "least used GPUs first (memory in use, then utilisation)"

    @staticmethod
    def rank(view: GpuView) -> tuple[int, float]:
        return use_of(view)
