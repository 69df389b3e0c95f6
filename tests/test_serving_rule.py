"""The queue's one serving rule (policies/serving.py), as the live queue, its estimates and
`simulate` all play it."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuallocd.policies.serving import serve_in_order, serve_where_free

Wants = dict[str, tuple[int, set[str]]]


def _free_pool_grant(
    free: set[str], wants: Wants
) -> Callable[[str, frozenset[str]], frozenset[str] | None]:
    def grant(name: str, held: frozenset[str]) -> frozenset[str] | None:
        count, pool = wants[name]
        available = sorted((pool & free) - held)
        if len(available) < count:
            return None
        taken = frozenset(available[:count])
        free.difference_update(taken)
        return taken

    return grant


def test_a_small_request_passes_a_blocked_large_one_only_on_gpus_it_could_never_use() -> None:
    """Large wants 3 of A-C (2 free): it holds A and B; small (any GPU) gets D, not A or B."""
    free = {"A", "B", "D"}
    wants = {"large": (3, {"A", "B", "C"}), "small": (1, {"A", "B", "C", "D"})}
    served = serve_in_order(
        ["large", "small"], _free_pool_grant(free, wants), lambda n: wants[n][1]
    )
    assert served == [("small", frozenset({"D"}))]
    assert free == {"A", "B"}


def test_waiters_that_fit_are_all_served_in_order() -> None:
    """Nothing blocked: each waiter is served in turn from what the ones before it left."""
    free = {"A", "B", "C"}
    wants = {"one": (1, {"A", "B", "C"}), "two": (2, {"A", "B", "C"})}
    served = serve_in_order(["one", "two"], _free_pool_grant(free, wants), lambda n: wants[n][1])
    assert served == [("one", frozenset({"A"})), ("two", frozenset({"B", "C"}))]


# Serving through the free units' lines: the same rule, looking at fewer waiters ----------------

Need = tuple[frozenset[str], frozenset[str], int]  # named, pool, count (as the view reads one)
UNITS = "ABCDE"


def _fits_grant(
    free: set[str], needs: list[Need], looked: list[int]
) -> Callable[[int, frozenset[str]], frozenset[str] | None]:
    """The view's grant: the named units and the lowest others of the pool, where they fit."""

    def grant(i: int, held: frozenset[str]) -> frozenset[str] | None:
        looked.append(i)
        named, pool, count = needs[i]
        available = free - held
        if not named <= available or len(pool & available) < count:
            return None
        taken = named | frozenset(sorted((pool & available) - named)[: count - len(named)])
        free.difference_update(taken)
        return taken

    return grant


def _lines(needs: list[Need], owners: list[int]) -> list[tuple[str, list[int]]]:
    """Each unit's waiters, a line per owner, in queue order."""
    lines: dict[tuple[str, int], list[int]] = {}
    for i, (_, pool, _) in enumerate(needs):
        for unit in sorted(pool):
            lines.setdefault((unit, owners[i]), []).append(i)
    return [(unit, line) for (unit, _), line in lines.items()]


_need = st.builds(
    lambda named, extra, more: (
        frozenset(named),
        frozenset(named) | frozenset(extra) if more else frozenset(named),
        len(named) + more,
    ),
    st.sets(st.sampled_from(UNITS), max_size=3),
    st.sets(st.sampled_from(UNITS), min_size=1, max_size=5),
    st.integers(0, 3),
).filter(lambda need: need[2] > 0 and len(need[1]) >= need[2])


@settings(max_examples=200, deadline=None)
@given(
    needs=st.lists(_need, max_size=24),
    owners=st.lists(st.integers(0, 3), min_size=24, max_size=24),
    free=st.sets(st.sampled_from(UNITS)),
)
def test_serving_the_free_units_lines_grants_and_holds_as_serving_every_waiter(
    needs: list[Need], owners: list[int], free: set[str]
) -> None:
    """Whatever the queue and the free units, serving through the lines of the free units
    grants the same waiters the same units as serving every waiter in turn."""
    every_free, lines_free = set(free), set(free)
    every = serve_in_order(
        range(len(needs)), _fits_grant(every_free, needs, []), lambda i: needs[i][1]
    )
    looked: list[int] = []
    by_lines = serve_where_free(
        _lines(needs, owners),
        lines_free.__contains__,
        _fits_grant(lines_free, needs, looked),
        lambda i: needs[i][1],
        lambda i: i,
    )
    assert by_lines == every
    assert lines_free == every_free
    assert looked == sorted(set(looked))  # in queue order, each once


def test_a_serve_looks_only_at_the_waiters_of_free_units() -> None:
    """A thousand waiters for busy unit A, then one for each of B and C: with B and C free,
    the serve looks at two waiters, not the thousand."""
    needs: list[Need] = [(frozenset("A"), frozenset("A"), 1)] * 1000
    needs += [(frozenset("B"), frozenset("B"), 1), (frozenset(), frozenset("AC"), 1)]
    free, looked = {"B", "C"}, list[int]()
    served = serve_where_free(
        _lines(needs, [0] * len(needs)),
        free.__contains__,
        _fits_grant(free, needs, looked),
        lambda i: needs[i][1],
        lambda i: i,
    )
    assert served == [(1000, frozenset("B")), (1001, frozenset("C"))]
    assert looked == [1000, 1001]
