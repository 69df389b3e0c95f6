"""`simple`: the required GPUs, then the lowest free indices (go-gpuallocator's Simple)."""

from __future__ import annotations

from gpuallocd.policies.base import AllocationRequest, Choice, NodeSnapshot
from gpuallocd.policies.common import candidates

__all__ = ["SimplePolicy"]


class SimplePolicy:
    """Lowest free indices first; ignores topology."""

    name = "simple"

    def choose(self, snapshot: NodeSnapshot, request: AllocationRequest) -> Choice:
        pool = candidates(snapshot, request)
        extra = request.count - len(request.required)
        picked = request.required + tuple(v.uuid for v in pool[:extra])
        return Choice(gpus=picked, reason="required GPUs, then the lowest free indices")
