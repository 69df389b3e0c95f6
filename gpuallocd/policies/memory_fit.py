"""`best-fit`, `worst-fit` and `random`: placement by free memory (GPU-utils' strategies).

Candidates are the usable GPUs whose free memory fits the request's need (an exact fit
fits). `best-fit` takes the least free memory, keeping roomy GPUs for big requests;
`worst-fit` the most, leaving the most headroom; ties go to the best topology, then the
lowest index. A GPU whose free memory is unknown ranks last. `random` takes any candidates,
drawn from a generator seeded by the `seed` option and the request and free set, so the
same snapshot and request always give the same GPUs.
"""

from __future__ import annotations

import hashlib
import random

from gpuallocd.policies.base import AllocationRequest, Choice, GpuView, NodeSnapshot
from gpuallocd.policies.common import candidates
from gpuallocd.policies.ranked import RankedPolicy
from gpuallocd.policies.scoring import set_score

__all__ = ["BestFitPolicy", "RandomPolicy", "WorstFitPolicy"]


class BestFitPolicy(RankedPolicy):
    """The GPUs with the least free memory that still fits."""

    name = "best-fit"
    preference = "least free memory that fits"

    @staticmethod
    def rank(view: GpuView) -> tuple[bool, int]:
        free = view.memory_free_bytes
        return (free is None, free or 0)


class WorstFitPolicy(RankedPolicy):
    """The GPUs with the most free memory."""

    name = "worst-fit"
    preference = "most free memory"

    @staticmethod
    def rank(view: GpuView) -> tuple[bool, int]:
        free = view.memory_free_bytes
        return (free is None, -(free or 0))


class RandomPolicy:
    """Any fitting GPUs, drawn reproducibly from `seed`, the request and the free set."""

    name = "random"

    def __init__(self, *, seed: int = 0) -> None:
        self.seed = seed

    def choose(self, snapshot: NodeSnapshot, request: AllocationRequest) -> Choice:
        pool = candidates(snapshot, request)
        extra = request.count - len(request.required)
        drawn = random.Random(self._seed_for(request, pool)).sample(pool, extra)
        picked = {*request.required, *(v.uuid for v in drawn)}
        gpus = tuple(g.uuid for g in snapshot.topology.gpus if g.uuid in picked)
        return Choice(
            gpus=gpus,
            score=float(set_score(snapshot.topology, gpus)),
            reason=f"random fitting GPUs (seed {self.seed})",
        )

    def _seed_for(self, request: AllocationRequest, pool: tuple[GpuView, ...]) -> int:
        material = "|".join(
            [
                str(self.seed),
                str(request.count),
                ",".join(request.required),
                str(request.min_free_memory_bytes),
                ",".join(v.uuid for v in pool),
            ]
        )
        return int.from_bytes(hashlib.sha256(material.encode()).digest()[:8], "big")
