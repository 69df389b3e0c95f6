"""The heap of coming ends (allocator/notices/ahead.py) holds about the armed deadlines'
entries, whatever the history, and says exactly what a heap that never forgets would say."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuallocd.allocator.notices import ahead
from gpuallocd.allocator.notices.ahead import Deadline, EndingAhead
from gpuallocd.model.notice import EndingReason
from tests.harness import HandClock

THRESHOLDS = (900.0, 60.0)


def deadline(left: float) -> Deadline:
    return Deadline(left=left, wall=1_800_000_000.0 + left, epoch=str(left))


def test_leases_freed_at_once_leave_nothing_in_the_heap() -> None:
    """10,000 one-hour leases granted and freed at once: their warnings would have stayed
    in the heap for the hour; the heap stays at the size of what is armed."""
    clock = HandClock(5000.0)
    coming = EndingAhead(clock)
    coming.arm("kept", EndingReason.EXPIRY, deadline(3600.0), THRESHOLDS)
    for n in range(10_000):
        coming.arm(f"lease{n}", EndingReason.EXPIRY, deadline(3600.0), THRESHOLDS)
        coming.disarm(f"lease{n}")
    assert len(coming) == 1 and coming.heap_size() <= 2 * ahead.MIN_COMPACTED
    clock.step(3600.0 - 900.0)
    assert [(w.lease_id, w.threshold) for w in coming.due()] == [("kept", 900.0)]


def test_renewals_leave_nothing_in_the_heap() -> None:
    """A lease renewed 10,000 times keeps the entries of its last deadline only."""
    coming = EndingAhead(HandClock(5000.0))
    for _ in range(10_000):
        coming.arm("renewed", EndingReason.EXPIRY, deadline(3600.0), THRESHOLDS)
    assert coming.heap_size() <= 2 * ahead.MIN_COMPACTED


_STEPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("arm"),
            st.integers(0, 6),
            st.sampled_from(list(EndingReason)),
            st.floats(1.0, 2000.0),
        ),
        st.tuples(st.just("disarm"), st.integers(0, 6), st.none(), st.none()),
        st.tuples(st.just("wait"), st.none(), st.none(), st.floats(0.0, 1200.0)),
    ),
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(steps=_STEPS)
def test_forgetting_stale_entries_changes_no_warning(steps: list[tuple[object, ...]]) -> None:
    """Any run of arms, disarms and waits: the same warnings as from a heap that keeps every
    stale entry until it comes up."""
    kept = ahead.MIN_COMPACTED
    clocks = [HandClock(5000.0), HandClock(5000.0)]
    compacting = EndingAhead(clocks[0])
    ahead.MIN_COMPACTED = 0  # this one rebuilds as soon as stale entries are half the heap
    try:
        told: list[list[tuple[str, EndingReason, float]]] = [[], []]
        never = EndingAhead(clocks[1])
        for kind, lease, reason, value in steps:
            for index, coming in enumerate((compacting, never)):
                ahead.MIN_COMPACTED = 0 if coming is compacting else 10**9
                if kind == "arm":
                    assert isinstance(reason, EndingReason) and isinstance(value, float)
                    coming.arm(f"l{lease}", reason, deadline(value), THRESHOLDS)
                elif kind == "disarm":
                    coming.disarm(f"l{lease}")
                else:
                    assert isinstance(value, float)
                    clocks[index].step(value)
                    found = coming.due()
                    told[index] += sorted((w.lease_id, w.reason, w.threshold) for w in found)
        assert told[0] == told[1]
    finally:
        ahead.MIN_COMPACTED = kept
