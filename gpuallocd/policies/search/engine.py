"""Exact search for the best subset of a given size under a pairwise objective.

    maximise   sum of linear[v] over v in S  +  sum of pair[u][v] over pairs {u, v} of S
    such that  |S| = size                     (every pair[u][v] >= 0)

Among sets of equal value the lexicographically smallest sorted tuple of items wins, so
the answer is unique and the same on every run.

The search is a branch and bound, made fast by exact reductions:

- **Twins.** Items with equal linear terms and equal pair weights to every other item are
  interchangeable; they form a class and the search only decides how many of a class to
  take (its lowest items). An NVSwitch box collapses to a handful of classes.
- **One in or one out.** Choosing one item needs no search (the best linear term wins),
  nor does leaving one out (the item whose linear term plus pairs is smallest goes).
- **Bound.** Each undecided class gets an optimistic gain: its linear term, its pairs to
  what is already chosen, and half of its best `r - 1` pairs to the undecided items; the best
  `r` of those gains bound any completion. A greedy set improved by swaps is the first
  incumbent.

`max_nodes` caps the work. A search that reaches the cap returns the best set it found and
says so (`exact=False`); it never claims a set it has not proven best.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuallocd.policies.search.classes import Classes, build_classes
from gpuallocd.policies.search.problem import SubsetProblem, SubsetResult

__all__ = ["SubsetProblem", "SubsetResult", "solve"]


def _value(problem: SubsetProblem, items: Sequence[int]) -> int:
    lin, pair = problem.linear, problem.pair
    total = sum(lin[v] for v in items)
    return total + sum(pair[a][b] for i, a in enumerate(items) for b in items[i + 1 :])


def solve(problem: SubsetProblem, *, max_nodes: int | None = None) -> SubsetResult:
    """The best set of `problem.size` items (see the module docstring)."""
    n, size = len(problem.linear), problem.size
    if not 0 <= size <= n:
        raise ValueError(f"cannot choose {size} of {n} items")
    if size in (0, n):
        items = tuple(range(size))
        return SubsetResult(items=items, value=_value(problem, items), exact=True, nodes=0)
    if 1 in (size, n - size):
        return _best_single(problem)
    tie = [1 << (n - 1 - v) for v in range(n)]  # the smallest items win ties
    found, exact, nodes = _BranchAndBound(problem, tie, max_nodes).run()
    items = tuple(sorted(found))
    return SubsetResult(items=items, value=_value(problem, items), exact=exact, nodes=nodes)


def _best_single(problem: SubsetProblem) -> SubsetResult:
    """Choosing one item, or leaving one out: the best linear term decides, no search."""
    n = len(problem.linear)
    if problem.size == 1:
        best = max(range(n), key=lambda v: (problem.linear[v], -v))
        items: tuple[int, ...] = (best,)
    else:  # leaving v out loses linear[v] and every pair of v; the largest item loses ties
        out = min(range(n), key=lambda v: (problem.linear[v] + sum(problem.pair[v]), -v))
        items = tuple(v for v in range(n) if v != out)
    return SubsetResult(items=items, value=_value(problem, items), exact=True, nodes=1)


def _greedy(problem: SubsetProblem, tie: Sequence[int]) -> list[int]:
    """Add the best item one at a time, then swap while a swap improves the set."""
    n, pair = len(problem.linear), problem.pair
    gain = list(problem.linear)  # linear[v] + pairs from v to the chosen items
    chosen: list[int] = []
    for _ in range(problem.size):
        best = max((v for v in range(n) if v not in chosen), key=lambda v: (gain[v], tie[v]))
        chosen.append(best)
        for v in range(n):
            gain[v] += pair[best][v]
    return _improve_by_swaps(problem, tie, chosen, gain)


def _improve_by_swaps(
    problem: SubsetProblem, tie: Sequence[int], chosen: list[int], gain: list[int]
) -> list[int]:
    n, pair = len(problem.linear), problem.pair
    for _ in range(4 * n):
        swap = _best_swap(chosen, gain, pair, tie, n)
        if swap is None:
            break
        out, into = swap
        chosen[chosen.index(out)] = into
        for v in range(n):
            gain[v] += pair[into][v] - pair[out][v]
    return chosen


def _best_swap(
    chosen: list[int], gain: list[int], pair: Sequence[Sequence[int]], tie: Sequence[int], n: int
) -> tuple[int, int] | None:
    inside = set(chosen)
    best: tuple[int, int, int, int] | None = None
    for out in chosen:
        keep = gain[out]  # the diagonal is zero: out's own contribution
        for into in range(n):
            if into in inside:
                continue
            delta = gain[into] - pair[into][out] - keep
            key = (delta, tie[into] - tie[out])
            if key > (0, 0) and (best is None or key > best[:2]):
                best = (delta, tie[into] - tie[out], out, into)
    return None if best is None else (best[2], best[3])


class _BranchAndBound:
    """Depth-first over twin classes: how many of each class to take, best first."""

    def __init__(self, problem: SubsetProblem, tie: Sequence[int], max_nodes: int | None):
        self.classes: Classes = build_classes(problem, tie)
        self.size = problem.size
        self.max_nodes = max_nodes
        self.nodes = 0
        self.stopped = False
        seed = _greedy(problem, tie)
        self.best_items: list[int] = seed
        self.best = (_value(problem, seed), sum(tie[v] for v in seed))
        count = len(self.classes.sizes)
        self.taken = [0] * count
        self.acc = [0] * count  # pairs from each class member to what is chosen so far

    def run(self) -> tuple[list[int], bool, int]:
        self._descend(0, self.size, 0, 0)
        return self.best_items, not self.stopped, self.nodes

    def _descend(self, depth: int, left: int, value: int, tie: int) -> None:
        if left == 0:
            self._offer(value, tie)
            return
        self.nodes += 1
        if self.max_nodes is not None and self.nodes > self.max_nodes:
            self.stopped = True
            return
        if self._pruned(depth, left, value, tie):
            return
        cls = self.classes
        room_after = cls.room[depth + 1]
        for take in range(min(cls.sizes[depth], left), max(0, left - room_after) - 1, -1):
            gain = take * (cls.linear[depth] + self.acc[depth])
            gain += cls.inner[depth] * take * (take - 1) // 2
            self._take(depth, take)
            self._descend(depth + 1, left - take, value + gain, tie + cls.tie_prefix[depth][take])
            self._take(depth, -take)
            if self.stopped:
                return

    def _take(self, depth: int, take: int) -> None:
        self.taken[depth] += take
        if take:
            row, acc = self.classes.cross[depth], self.acc
            for j in range(depth + 1, len(acc)):
                acc[j] += row[j] * take

    def _pruned(self, depth: int, left: int, value: int, tie: int) -> bool:
        bound = 2 * value + self._gain_bound(depth, left)
        best_twice = 2 * self.best[0]
        if bound != best_twice:
            return bound < best_twice
        return tie + self.classes.tie_bound(depth, left) <= self.best[1]

    def _gain_bound(self, depth: int, left: int) -> int:
        """Twice the most that `left` more items from classes >= depth can add."""
        cls, acc = self.classes, self.acc
        gains = sorted(
            (
                (2 * (cls.linear[i] + acc[i]) + cls.pairs_bound(i, depth, left - 1), cls.sizes[i])
                for i in range(depth, len(cls.sizes))
            ),
            reverse=True,
        )
        total = 0
        for gain, copies in gains:
            use = min(copies, left)
            total += gain * use
            left -= use
            if not left:
                break
        return total

    def _offer(self, value: int, tie: int) -> None:
        if (value, tie) > self.best:
            self.best = (value, tie)
            self.best_items = self.classes.members_taken(self.taken)
