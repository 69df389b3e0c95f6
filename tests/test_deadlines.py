"""Lease deadlines run on the monotonic clock; the due leases are found in one reading."""

from __future__ import annotations

from gpuallocd.allocator.leases.deadlines import Deadlines
from gpuallocd.model import Lease, LeasedGpu
from tests.harness import HandClock


def _lease(lease_id: str, expires_at: float) -> Lease:
    return Lease(
        id=lease_id,
        gpus=(LeasedGpu("GPU-0", 0),),
        owner_uid=1000,
        owner_name="ana",
        pid=None,
        label=None,
        policy="best-effort",
        created_at=0.0,
        expires_at=expires_at,
    )


def test_due_leases_are_those_past_their_deadline_at_one_reading_of_the_clock() -> None:
    wall, monotonic = HandClock(1000.0), HandClock(50.0)
    deadlines = Deadlines(wall, monotonic, max_seconds=3600)
    for name, ttl in (("a", 10), ("b", 20), ("c", 30)):
        deadlines.start(name, ttl)
    leases = [_lease(name, 0.0) for name in "abc"]
    monotonic.now, monotonic.reads = 70.0, 0
    assert [lease.id for lease in deadlines.due(leases)] == ["a", "b"]
    assert monotonic.reads == 1
    assert deadlines.due(leases[:1] + leases[2:]) == leases[:1]


def test_a_lease_read_from_the_ledger_is_due_by_the_wall_clock_time_it_had_left() -> None:
    """Not started here (the daemon restarted): its deadline is what the wall clock left it,
    counted from now on the monotonic clock, and never more than the longest TTL."""
    wall, monotonic = HandClock(1000.0), HandClock(5.0)
    deadlines = Deadlines(wall, monotonic, max_seconds=100)
    soon, late, capped = _lease("soon", 1030.0), _lease("late", 1090.0), _lease("cap", 9e9)
    assert deadlines.due([soon, late, capped]) == []
    monotonic.now = 40.0
    assert deadlines.due([soon, late, capped]) == [soon]
    monotonic.now = 105.0
    assert deadlines.due([soon, late, capped]) == [soon, late, capped]
