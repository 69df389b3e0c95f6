"""The exact subset search: the best value and the smallest items among equals, always."""

from __future__ import annotations

from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuallocd.policies.search.classes import twin_groups
from gpuallocd.policies.search.engine import SubsetProblem, solve

PROPERTY = settings(max_examples=300, deadline=None)


@st.composite
def problems(draw: st.DrawFn, max_items: int = 10) -> SubsetProblem:
    """Random problems; weights drawn from few values so that twins and ties are common."""
    n = draw(st.integers(1, max_items))
    weight = st.sampled_from((0, 1, 3, 3, 10))
    pair = [[0] * n for _ in range(n)]
    for a, b in combinations(range(n), 2):
        pair[a][b] = pair[b][a] = draw(weight)
    linear = [draw(st.sampled_from((0, 0, -2, 5))) for _ in range(n)]
    return SubsetProblem(linear=linear, pair=pair, size=draw(st.integers(0, n)))


def brute_force(problem: SubsetProblem) -> tuple[int, tuple[int, ...]]:
    best: tuple[int, tuple[int, ...]] | None = None
    for items in combinations(range(len(problem.linear)), problem.size):
        value = sum(problem.linear[v] for v in items)
        value += sum(problem.pair[a][b] for a, b in combinations(items, 2))
        if best is None or value > best[0]:  # combinations come in lexicographic order
            best = (value, items)
    assert best is not None
    return best


@PROPERTY
@given(problems())
def test_finds_the_best_value_and_the_smallest_items_among_equals(problem: SubsetProblem) -> None:
    """The result equals the first best set in lexicographic order over all subsets."""
    result = solve(problem)
    assert (result.value, result.items) == brute_force(problem)
    assert result.exact


@PROPERTY
@given(problems())
def test_twin_groups_are_interchangeable_items(problem: SubsetProblem) -> None:
    """Items in one group have equal linear terms and equal weights to every other item."""
    for group in twin_groups(problem.linear, problem.pair):
        for u, v in combinations(group, 2):
            assert problem.linear[u] == problem.linear[v]
            others = set(range(len(problem.linear))) - {u, v}
            assert all(problem.pair[u][w] == problem.pair[v][w] for w in others)


def test_a_uniform_problem_is_one_twin_class() -> None:
    """Twelve items all linked alike (an NVSwitch box) form a single class."""
    n = 12
    pair = [[0 if a == b else 7 for b in range(n)] for a in range(n)]
    assert twin_groups([0] * n, pair) == [list(range(n))]


def test_a_uniform_problem_needs_almost_no_search() -> None:
    """Choosing 6 of 12 identical items visits a single search node."""
    n = 12
    pair = [[0 if a == b else 7 for b in range(n)] for a in range(n)]
    result = solve(SubsetProblem(linear=[0] * n, pair=pair, size=6))
    assert result.items == (0, 1, 2, 3, 4, 5)
    assert result.nodes <= 1


def test_a_capped_search_returns_a_valid_unproven_set() -> None:
    """With max_nodes=1 the result has the right size and exact=False when it had to stop."""
    n = 14
    pair = [[0 if a == b else (a * 7 + b * 3) % 5 for b in range(n)] for a in range(n)]
    pair = [[max(pair[a][b], pair[b][a]) for b in range(n)] for a in range(n)]
    result = solve(SubsetProblem(linear=[0] * n, pair=pair, size=7), max_nodes=1)
    assert len(set(result.items)) == 7
    assert not result.exact


def test_an_impossible_size_is_an_error() -> None:
    """Asking for more items than exist is a programming error."""
    with pytest.raises(ValueError, match="cannot choose 3 of 2"):
        solve(SubsetProblem(linear=[0, 0], pair=[[0, 1], [1, 0]], size=3))
