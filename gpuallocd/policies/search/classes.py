"""Twin classes of a subset problem, and the bounds the search reads from them.

Two items are twins when their linear terms are equal and their pair weights to every
other item are equal. Twinship is an equivalence, the pair weight inside a class is one
value, and between two classes it is one value too, so a class is described by its size,
its linear term, its inner weight and its cross weights. Members of a class are kept in
tie order (the preferred member first): the search takes a class's first `k` members.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from gpuallocd.policies.search.problem import SubsetProblem

__all__ = ["Classes", "build_classes", "twin_groups"]


def twin_groups(linear: Sequence[int], pair: Sequence[Sequence[int]]) -> list[list[int]]:
    """The twin classes, each in item order, ordered by their first item.

    Twins have the same linear term and the same multiset of pair weights, so items are
    first bucketed by both; inside a bucket each item is compared with one member of each
    class found so far (twinship is an equivalence), ignoring the two items' own entries.
    """
    buckets: dict[tuple[int, tuple[int, ...]], list[list[int]]] = {}
    for u in range(len(linear)):
        classes = buckets.setdefault((linear[u], tuple(sorted(pair[u]))), [])
        for members in classes:
            if _twins(pair, u, members[0]):
                members.append(u)
                break
        else:
            classes.append([u])
    return sorted(members for classes in buckets.values() for members in classes)


def _twins(pair: Sequence[Sequence[int]], u: int, v: int) -> bool:
    row_u, row_v = list(pair[u]), list(pair[v])
    row_u[u] = row_u[v] = row_v[u] = row_v[v] = 0
    return row_u == row_v


def _top_sums(values: list[tuple[int, int]], limit: int) -> list[int]:
    """Prefix sums of the `limit` largest values of a multiset given as (value, copies)."""
    flat: list[int] = []
    for value, copies in sorted(values, reverse=True):
        flat += [value] * min(copies, limit - len(flat))
        if len(flat) >= limit:
            break
    return [0, *accumulate(flat)]


@dataclass
class Classes:
    """Twin classes in search order (most promising first)."""

    members: list[list[int]]
    linear: list[int]
    inner: list[int]
    cross: list[list[int]]
    ties: list[list[int]]
    limit: int
    sizes: list[int] = field(init=False)
    room: list[int] = field(init=False)
    tie_prefix: list[list[int]] = field(init=False)
    _pair_sums: dict[tuple[int, int], list[int]] = field(init=False, default_factory=dict)
    _tie_sums: dict[int, list[int]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.sizes = [len(m) for m in self.members]
        self.room = [*accumulate(self.sizes[::-1], initial=0)][::-1]
        self.tie_prefix = [[0, *accumulate(t)] for t in self.ties]

    def pairs_bound(self, i: int, depth: int, count: int) -> int:
        """The `count` best pair weights from a member of class i to items of classes >= depth."""
        key = (i, depth)
        sums = self._pair_sums.get(key)
        if sums is None:
            values = [(self.inner[i], self.sizes[i] - 1)]
            values += [
                (self.cross[i][j], self.sizes[j]) for j in range(depth, len(self.sizes)) if j != i
            ]
            sums = self._pair_sums[key] = _top_sums(values, self.limit)
        return sums[min(count, len(sums) - 1)]

    def root_bound(self, i: int) -> list[int]:
        self.pairs_bound(i, 0, 0)
        return self._pair_sums[(i, 0)]

    def remember_root_bound(self, i: int, sums: list[int]) -> None:
        self._pair_sums[(i, 0)] = sums

    def tie_bound(self, depth: int, count: int) -> int:
        """The best tie-break total of `count` members of classes >= depth."""
        sums = self._tie_sums.get(depth)
        if sums is None:
            values = [(t, 1) for ties in self.ties[depth:] for t in ties]
            sums = self._tie_sums[depth] = _top_sums(values, self.limit)
        return sums[min(count, len(sums) - 1)]

    def members_taken(self, taken: Sequence[int]) -> list[int]:
        return [v for members, k in zip(self.members, taken, strict=False) for v in members[:k]]


def build_classes(problem: SubsetProblem, tie: Sequence[int]) -> Classes:
    """The twin classes of `problem`, members by descending tie, classes by promise."""
    groups = [sorted(g, key=lambda v: -tie[v]) for g in twin_groups(problem.linear, problem.pair)]
    pair, lin = problem.pair, problem.linear
    inner = [pair[g[0]][g[1]] if len(g) > 1 else 0 for g in groups]
    cross = [[pair[a[0]][b[0]] for b in groups] for a in groups]
    unordered = Classes(
        members=groups,
        linear=[lin[g[0]] for g in groups],
        inner=inner,
        cross=cross,
        ties=[[tie[v] for v in g] for g in groups],
        limit=problem.size,
    )
    order = sorted(range(len(groups)), key=lambda i: _promise(unordered, i, problem.size, tie))
    ordered = Classes(
        members=[groups[i] for i in order],
        linear=[unordered.linear[i] for i in order],
        inner=[inner[i] for i in order],
        cross=[[cross[i][j] for j in order] for i in order],
        ties=[unordered.ties[i] for i in order],
        limit=problem.size,
    )
    for new, old in enumerate(order):  # bounds over all classes do not depend on the order
        ordered.remember_root_bound(new, unordered.root_bound(old))
    return ordered


def _promise(classes: Classes, i: int, size: int, tie: Sequence[int]) -> tuple[int, int]:
    """Sort key: the most promising class first, then the one holding the preferred item."""
    gain = 2 * classes.linear[i] + classes.pairs_bound(i, 0, size - 1)
    return (-gain, -tie[classes.members[i][0]])
