"""How fragmented the free GPUs are: their score against the best set of the same size.

    fragmentation = 1 - score(free GPUs) / score(best set of as many GPUs on the node)

0 means the free GPUs are as well connected as any set of their size can be; 1 means
none of their pairs has any link quality left (a free set of 0 or 1 GPU counts as 0). On
an NVSwitch box every set has full lanes, so only PCIe and NUMA fragment; on NVLink pairs
and meshes, scattered singles drive it up.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuallocd.policies.scoring import WeightMatrix
from gpuallocd.policies.search.picker import PickRequest, pick

__all__ = ["FreeSetQuality"]

_MAX_NODES = 1_000_000


class FreeSetQuality:
    """The free positions of a node and their score, kept up to date step by step."""

    def __init__(self, matrix: WeightMatrix) -> None:
        self.matrix = matrix
        self.free = set(range(len(matrix.weights)))
        self.value = matrix.set_value(sorted(self.free))
        self._ideal: dict[int, int] = {}

    def take(self, positions: Iterable[int]) -> None:
        chosen = list(positions)
        self.free.difference_update(chosen)
        self.value -= self._cross(chosen) + self.matrix.set_value(chosen)

    def give_back(self, positions: Iterable[int]) -> None:
        returned = list(positions)
        self.value += self._cross(returned) + self.matrix.set_value(returned)
        self.free.update(returned)

    def fragmentation(self) -> float:
        best = self.ideal(len(self.free))
        return 0.0 if best == 0 else 1.0 - self.value / best

    def ideal(self, size: int) -> int:
        """The best score of any `size` GPUs of the node (computed once per size)."""
        if size not in self._ideal:
            everyone = tuple(range(len(self.matrix.weights)))
            ask = PickRequest(required=(), selectable=everyone, others=(), count=size)
            found = pick(self.matrix, ask, max_nodes=_MAX_NODES)
            self._ideal[size] = self.matrix.set_value(found.positions)
        return self._ideal[size]

    def _cross(self, positions: list[int]) -> int:
        rows, free = self.matrix.weights, self.free
        return sum(rows[p][q] for p in positions for q in free)
