"""The best set for a topology: highest score, then least damage, then lowest indices.

The objective handed to the exact search is, for the chosen set S (required GPUs R plus
the picked GPUs P) and the GPUs F that stay free:

    K * score(S) - damage(S),    damage(S) = sum of pair scores between S and F

with K larger than any damage, so the score decides and damage only breaks its ties.
Damage is the link quality the request cuts away from what stays free: a single GPU whose
NVLink partner is busy cuts nothing, one from an intact pair cuts the pair; a pair taken
from an intact quad cuts the quad's other links. Expanded over P it is linear plus
pairwise, the shape `engine.py` solves exactly:

    linear[v] = (K + 1) * w(v, R) - w(v, F + P)        pair[u][v] = (K + 2) * w(u, v)

Positions are indices into the topology's GPUs in index order, so ties go to the lowest
GPU indices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from gpuallocd.model import Topology
from gpuallocd.policies.scoring import WeightMatrix, weight_matrix
from gpuallocd.policies.search.engine import SubsetProblem, solve

__all__ = ["Pick", "PickRequest", "Picker", "pick"]


@dataclass(frozen=True, slots=True)
class PickRequest:
    """Choose `count` of `selectable`, with `required` already in and `others` left free."""

    required: tuple[int, ...]
    selectable: tuple[int, ...]
    others: tuple[int, ...]
    count: int


@dataclass(frozen=True, slots=True)
class Pick:
    """The chosen positions (required first), and whether the search proved them best."""

    positions: tuple[int, ...]
    exact: bool
    nodes: int


def _problem(weights: Sequence[Sequence[int]], ask: PickRequest) -> SubsetProblem:
    pool, required, free = ask.selectable, ask.required, ask.selectable + ask.others
    to_free = [sum(map(weights[v].__getitem__, free)) for v in pool]
    to_required = [sum(map(weights[v].__getitem__, required)) for v in pool]
    damage_cap = 1 + sum(to_free) + sum(sum(map(weights[r].__getitem__, free)) for r in required)
    linear = tuple(
        (damage_cap + 1) * near - cut for near, cut in zip(to_required, to_free, strict=True)
    )
    if ask.count <= 1:  # a set of one has no pairs: the O(n^2) matrix is never read
        return SubsetProblem(linear=linear, pair=(), size=ask.count)
    scale = damage_cap + 2
    pair = tuple(tuple(scale * w for w in map(weights[v].__getitem__, pool)) for v in pool)
    return SubsetProblem(linear=linear, pair=pair, size=ask.count)


def pick(matrix: WeightMatrix, ask: PickRequest, *, max_nodes: int | None = None) -> Pick:
    """The best `ask.count` selectable positions for `matrix`'s topology (pure)."""
    found = solve(_problem(matrix.weights, ask), max_nodes=max_nodes)
    chosen = tuple(ask.selectable[i] for i in found.items)
    return Pick(positions=ask.required + chosen, exact=found.exact, nodes=found.nodes)


class _SameTopology:
    """A hashable handle on one Topology object, by identity (topologies are immutable)."""

    __slots__ = ("topology",)

    def __init__(self, topology: Topology) -> None:
        self.topology = topology

    def __hash__(self) -> int:
        return id(self.topology)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SameTopology) and other.topology is self.topology


class Picker:
    """`pick` with a bounded memo: the same question on the same topology is answered once.

    The memo only saves work; every answer equals what `pick` computes. A policy keeps
    one Picker, so a daemon or a simulation that meets the same free set again pays
    nothing.
    """

    def __init__(self, *, max_nodes: int | None, cache_size: int) -> None:
        self.max_nodes = max_nodes
        self._matrix: Callable[[_SameTopology], WeightMatrix] = lru_cache(maxsize=4)(
            lambda handle: weight_matrix(handle.topology)
        )
        self._pick: Callable[[_SameTopology, PickRequest], Pick] = lru_cache(maxsize=cache_size)(
            self._pick_uncached
        )

    def matrix(self, topology: Topology) -> WeightMatrix:
        return self._matrix(_SameTopology(topology))

    def pick(self, topology: Topology, ask: PickRequest) -> Pick:
        return self._pick(_SameTopology(topology), ask)

    def _pick_uncached(self, handle: _SameTopology, ask: PickRequest) -> Pick:
        return pick(self.matrix(handle.topology), ask, max_nodes=self.max_nodes)
