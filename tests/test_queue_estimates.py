"""The queue's estimated starts: the queue played forward through the releases to come, in
one pass that looks only at the waiters of the GPUs free at each release."""

from __future__ import annotations

import heapq

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpuallocd.allocator.queue.view import _Need, _play_forward
from gpuallocd.policies.serving import serve_in_order

UNITS = "ABCD"

_needs = st.lists(
    st.builds(
        lambda named, extra, more: _Need(
            frozenset(named), frozenset(named) | frozenset(extra), len(named) + more
        ),
        st.sets(st.sampled_from(UNITS), max_size=1),
        st.sets(st.sampled_from(UNITS), max_size=4),
        st.integers(0, 1),
    ),
    max_size=30,
)
_releases = st.lists(
    st.tuples(st.integers(1, 20).map(float), st.sets(st.sampled_from(UNITS)).map(frozenset)),
    max_size=10,
)


def _every_waiter_at_every_release(
    needs: list[_Need],
    free_now: set[str],
    releases: list[tuple[float, frozenset[str]]],
    now: float,
    ttls: list[float],
) -> list[float | None]:
    """The estimate as the queue's rule says it, waiter by waiter at each release."""
    starts: list[float | None] = [None] * len(needs)
    free, pending, at = set(free_now), list(range(len(needs))), now

    def grant(i: int, held: frozenset[str]) -> frozenset[str] | None:
        available = free - held
        if not needs[i].fits(available):
            return None
        taken = needs[i].take(available)
        free.difference_update(taken)
        starts[i] = at
        heapq.heappush(releases, (at + ttls[i], taken))
        return taken

    while pending:
        served = {i for i, _ in serve_in_order(pending, grant, lambda i: needs[i].pool)}
        pending = [i for i in pending if i not in served]
        if not pending or not releases:
            break
        at, gpus = heapq.heappop(releases)
        free |= gpus
        while releases and releases[0][0] <= at:
            free |= heapq.heappop(releases)[1]
    return starts


@settings(max_examples=300, deadline=None)
@example(  # B's line holds a waiter served before the one ahead of it, which leaves B free
    needs=[_Need(frozenset(), frozenset("AB"), 1), _Need(frozenset(), frozenset("BC"), 1)],
    free={"C"},
    releases=[(5.0, frozenset("AB"))],
    ttls=[10.0] * 30,
)
@given(
    needs=_needs,
    free=st.sets(st.sampled_from(UNITS)),
    releases=_releases,
    ttls=st.lists(st.integers(1, 30).map(float), min_size=30, max_size=30),
)
def test_estimates_are_those_of_serving_every_waiter_at_every_release(
    needs: list[_Need],
    free: set[str],
    releases: list[tuple[float, frozenset[str]]],
    ttls: list[float],
) -> None:
    """Whatever the queue, the free GPUs and the releases to come, each waiter's estimated
    start is the one the rule gives served waiter by waiter at every release."""
    heap = list(releases)
    heapq.heapify(heap)
    expected = _every_waiter_at_every_release(needs, free, list(heap), 0.0, ttls)
    # A need of no GPU starts at once: no estimate shows it (only starts later than now do).
    shown = [None if s == 0.0 else s for s in expected]
    got = _play_forward(needs, set(free), list(heap), 0.0, ttls)
    assert [None if s == 0.0 else s for s in got] == shown
