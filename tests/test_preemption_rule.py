"""The preemption rule (policies/preemption.py), proved over generated snapshots: never before
a minimum runtime, never more leases than needed and the least work lost, never by a
preemptible request, the same answer for the same snapshot, every decision in words."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuallocd.policies.preemption import (
    Candidate,
    PreemptRequest,
    admin_decision,
    cover,
    plan_queue,
    reservation_victims,
)

UNITS = [f"GPU-{i}" for i in range(8)]
HOUR = 3600.0


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[frozenset[str], list[Candidate]]:
    """Free units and preemptible leases over 8 units, each unit in at most one lease."""
    units = list(UNITS)
    draw(st.randoms()).shuffle(units)
    free = frozenset(units[: draw(st.integers(0, 3))])
    rest = units[len(free) :]
    candidates: list[Candidate] = []
    while rest and draw(st.booleans()):
        size = draw(st.integers(1, min(3, len(rest))))
        held, rest = frozenset(rest[:size]), rest[size:]
        candidates.append(
            Candidate(
                lease_id=f"l{len(candidates)}",
                owner=draw(st.sampled_from(["alice", "carol"])),
                owner_uid=draw(st.sampled_from([1000, 1002])),
                units=held,
                ran_seconds=draw(st.floats(0, 4 * HOUR)),
                min_runtime_seconds=draw(st.sampled_from([0.0, 1800.0, 2 * HOUR])),
                lost_seconds=draw(st.floats(0, 4 * HOUR)),
                checkpointed=draw(st.booleans()),
                preempting=draw(st.booleans()) and draw(st.booleans()),
            )
        )
    return free, candidates


requests = st.builds(
    PreemptRequest,
    id=st.just("w1"),
    owner=st.sampled_from(["bob", "alice"]),
    owner_uid=st.sampled_from([1001, 1000]),
    count=st.integers(1, 6),
    pool=st.just(frozenset(UNITS)),
    preemptible=st.booleans(),
)


def _room(request: PreemptRequest, free: frozenset[str], leases: list[Candidate]) -> int:
    """How many units the request would have: free, coming, and freed by `leases`."""
    pool = request.pool
    units = set(free & pool)
    for c in leases:
        units |= c.units & pool
    return len(units)


def _coming(candidates: list[Candidate]) -> list[Candidate]:
    return [c for c in candidates if c.preempting]


@settings(max_examples=300, deadline=None)
@given(snapshots(), requests)
def test_a_victim_is_past_its_minimum_never_the_requesters_never_twice(
    snapshot: tuple[frozenset[str], list[Candidate]], request: PreemptRequest
) -> None:
    """Every lease preempted has run its minimum, belongs to someone else, and is not being
    preempted already; a preemptible request preempts nothing."""
    free, candidates = snapshot
    (plan,) = plan_queue([request], free, candidates)
    if request.preemptible:
        assert plan.victims == () and plan.later == ()
    for victim in plan.victims:
        assert victim.ran_seconds >= victim.min_runtime_seconds
        assert victim.owner_uid != request.owner_uid
        assert not victim.preempting


@settings(max_examples=300, deadline=None)
@given(snapshots(), requests)
def test_never_more_leases_than_the_request_needs(
    snapshot: tuple[frozenset[str], list[Candidate]], request: PreemptRequest
) -> None:
    """With its victims the request has room; without any one of them it would not."""
    free, candidates = snapshot
    (plan,) = plan_queue([request], free, candidates)
    if not plan.victims:
        return
    base = _coming(candidates)
    assert _room(request, free, [*base, *plan.victims]) >= request.count
    for victim in plan.victims:
        fewer = [c for c in plan.victims if c is not victim]
        assert _room(request, free, [*base, *fewer]) < request.count


@settings(max_examples=200, deadline=None)
@given(snapshots(), requests.filter(lambda r: not r.preemptible and r.owner == "bob"))
def test_the_least_work_is_lost_and_room_is_made_whenever_it_can_be(
    snapshot: tuple[frozenset[str], list[Candidate]], request: PreemptRequest
) -> None:
    """Brute force over every set of eligible leases: the rule finds room exactly when some
    set makes it, and loses no more work than the best of them."""
    free, candidates = snapshot
    request = PreemptRequest("w1", "bob", 1001, request.count, frozenset(UNITS))
    eligible = [
        c
        for c in candidates
        if not c.preempting and c.eligible_in == 0 and c.owner_uid != request.owner_uid
    ]
    base = _coming(candidates)
    best: float | None = None
    for size in range(len(eligible) + 1):
        for chosen in itertools.combinations(eligible, size):
            if _room(request, free, [*base, *chosen]) >= request.count:
                cost = sum(c.work_lost for c in chosen)
                best = cost if best is None else min(best, cost)
    (plan,) = plan_queue([request], free, candidates)
    if best is None:
        assert plan.victims == ()
        return
    needs_none = _room(request, free, base) >= request.count
    assert bool(plan.victims) != needs_none
    assert sum(c.work_lost for c in plan.victims) <= best + 1e-6


@settings(max_examples=150, deadline=None)
@given(snapshots(), requests, st.randoms())
def test_the_same_snapshot_gives_the_same_answer(
    snapshot: tuple[frozenset[str], list[Candidate]],
    request: PreemptRequest,
    shuffler: random.Random,
) -> None:
    """Whatever order the leases come in, the plan is the same."""
    free, candidates = snapshot
    shuffled = list(candidates)
    shuffler.shuffle(shuffled)
    assert plan_queue([request], free, candidates) == plan_queue([request], free, shuffled)


@settings(max_examples=200, deadline=None)
@given(snapshots(), st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_a_queue_of_requests_never_preempts_one_lease_twice_nor_more_than_all_need(
    snapshot: tuple[frozenset[str], list[Candidate]], counts: list[int]
) -> None:
    """Several waiters in order: each lease is preempted for one of them at most, and no more
    units are freed than the waiters ask for in all (plus what one lease holds beyond)."""
    free, candidates = snapshot
    waiters = [
        PreemptRequest(f"w{n}", f"u{n}", 2000 + n, count, frozenset(UNITS))
        for n, count in enumerate(counts)
    ]
    plans = plan_queue(waiters, free, candidates)
    victims = [v.lease_id for plan in plans for v in plan.victims]
    assert len(victims) == len(set(victims))
    freed = sum(len(v.units) for plan in plans for v in plan.victims)
    largest = max((len(c.units) for c in candidates), default=0)
    assert freed <= sum(counts) + largest * len(counts)


def test_an_explanation_names_the_lease_its_owner_the_requester_and_the_times() -> None:
    """The words a decision is shown in, as the issue wrote them."""
    lease = Candidate("3f2a", "alice", 1000, frozenset({"GPU-0"}), 7800.0, 1800.0, 600.0, True)
    (plan,) = plan_queue(
        [PreemptRequest("w", "bob", 1001, 1, frozenset({"GPU-0"}))], frozenset(), [lease]
    )
    assert plan.why == (
        "preempting lease 3f2a of alice for bob's request: it ran 2h10m, past its minimum of "
        "30m; 10m of work since its last checkpoint",
    )


def test_a_lease_within_its_minimum_is_preempted_later_and_told_when() -> None:
    """Before the minimum runtime nothing is preempted; the plan says in how long."""
    young = Candidate("young", "alice", 1000, frozenset({"GPU-0"}), 600.0, 1800.0, 600.0)
    (plan,) = plan_queue(
        [PreemptRequest("w", "bob", 1001, 1, frozenset({"GPU-0"}))], frozenset(), [young]
    )
    assert plan.victims == () and plan.later == (young,) and plan.later_in == 1200.0
    assert plan.why == (
        "will preempt lease young of alice in 20m, when its minimum runtime of 30m has passed",
    )


def test_the_lease_that_loses_least_goes_first_and_a_free_unit_counts_first() -> None:
    """Of two leases, the one with the fresher checkpoint; with a unit free, only one more."""
    fresh = Candidate("a", "alice", 1000, frozenset({"GPU-1"}), 7200, 0, 60, True)
    stale = Candidate("b", "carol", 1002, frozenset({"GPU-2"}), 7200, 0, 3600)
    bob = PreemptRequest("w", "bob", 1001, 2, frozenset({"GPU-0", "GPU-1", "GPU-2"}))
    (plan,) = plan_queue([bob], frozenset({"GPU-0"}), [stale, fresh])
    assert [v.lease_id for v in plan.victims] == ["a"]


def test_a_named_unit_is_taken_from_its_holder_whatever_it_costs() -> None:
    """A request naming GPU-2 preempts GPU-2's holder, not a cheaper lease elsewhere."""
    cheap = Candidate("a", "alice", 1000, frozenset({"GPU-1"}), 7200, 0, 1)
    named = Candidate("b", "carol", 1002, frozenset({"GPU-2"}), 7200, 0, 3600)
    bob = PreemptRequest("w", "bob", 1001, 1, frozenset({"GPU-1", "GPU-2"}), frozenset({"GPU-2"}))
    (plan,) = plan_queue([bob], frozenset(), [cheap, named])
    assert [v.lease_id for v in plan.victims] == ["b"]


def test_cover_prefers_fewer_leases_at_equal_loss() -> None:
    """Two leases that lose nothing cover 2 units; so does one that holds both: one lease."""
    pair = Candidate("z", "alice", 1000, frozenset({"GPU-0", "GPU-1"}), 9000, 0, 0)
    one = Candidate("a", "alice", 1000, frozenset({"GPU-2"}), 9000, 0, 0)
    two = Candidate("b", "alice", 1000, frozenset({"GPU-3"}), 9000, 0, 0)
    chosen = cover([one, two, pair], frozenset(UNITS), 2)
    assert chosen is not None and [c.lease_id for c in chosen] == ["z"]


def test_an_admin_waits_for_the_minimum_runtime() -> None:
    """An admin's preemption is refused before the minimum, with the time left."""
    young = Candidate("y", "alice", 1000, frozenset({"GPU-0"}), 100.0, 1800.0, 100.0)
    decision = admin_decision(young, "root")
    assert not decision.allowed and decision.wait_seconds == 1700.0
    old = Candidate("o", "alice", 1000, frozenset({"GPU-0"}), 3600.0, 1800.0, 100.0)
    assert admin_decision(old, "root").explanation.startswith(
        "preempting lease o of alice for root (admin): it ran 1h"
    )


def test_a_reservation_preempts_each_lease_as_late_as_its_notice_allows() -> None:
    """A lease with 6 minutes of notice is preempted when the start is 6 minutes away, not
    before; one within its minimum runtime is not (the reservation waits for it)."""
    lease = Candidate("a", "alice", 1000, frozenset({"GPU-0"}), 9000, 1800, 60, notice_seconds=360)
    young = Candidate("b", "alice", 1000, frozenset({"GPU-1"}), 60, 1800, 60, notice_seconds=360)
    units = frozenset({"GPU-0", "GPU-1"})
    assert reservation_victims("r1", "bob", units, 361.0, [lease, young]) == []
    found = reservation_victims("r1", "bob", units, 359.0, [lease, young])
    assert [(c.lease_id, why.split(":")[0]) for c, why in found] == [
        ("a", "preempting lease a of alice for reservation r1 of bob")
    ]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=10, max_size=40), st.sampled_from([600.0, 1800.0]))
def test_a_storm_of_small_requests_never_makes_jobs_thrash(
    arrivals: list[int], minimum: float
) -> None:
    """Twelve hours in steps of five minutes: a night of preemptible jobs on every unit, then
    small requests (ten minutes each, `arrivals[i]` of them at step i) while every preempted
    job requeues, preemptible. Each job is preempted at most once per minimum runtime, and no
    requeue ever preempts anyone."""
    step, notice = 300.0, 360.0
    asked = sum(arrivals)
    ids = itertools.count()
    # lease -> (job, units, start, preemptible)
    leases = {
        f"n{u}": (f"job{u}", frozenset({unit}), -8 * HOUR, True) for u, unit in enumerate(UNITS)
    }
    ending: dict[str, float] = {}
    requeues: list[str] = []  # jobs waiting to run again
    storm: list[int] = []
    preempted: dict[str, list[float]] = {}  # job -> when each of its leases was preempted
    for now in (step * n for n in range(1, 145)):
        for lease_id in [i for i, at in ending.items() if at <= now]:
            requeues.append(leases.pop(lease_id)[0])
            del ending[lease_id]
        for lease_id in [i for i, v in leases.items() if not v[3] and now - v[2] >= 600]:
            del leases[lease_id]
        if arrivals:
            storm += [1] * arrivals.pop(0)
        free = frozenset(UNITS) - {u for v in leases.values() for u in v[1]}
        waiting = [
            PreemptRequest(f"s{n}", "bob", 1001, c, frozenset(UNITS)) for n, c in enumerate(storm)
        ]
        waiting += [
            PreemptRequest(job, "alice", 1000, 1, frozenset(UNITS), preemptible=True)
            for job in requeues
        ]
        candidates = [
            Candidate(
                i, "alice", 1000, v[1], now - v[2], minimum, now - v[2], preempting=i in ending
            )
            for i, v in leases.items()
            if v[3]
        ]
        for request, plan in zip(waiting, plan_queue(waiting, free, candidates), strict=True):
            assert not (request.preemptible and (plan.victims or plan.later))
            for victim in plan.victims:
                assert victim.ran_seconds >= minimum
                preempted.setdefault(leases[victim.lease_id][0], []).append(now)
                ending[victim.lease_id] = now + notice
        spare = sorted(free)
        while storm and len(spare) >= storm[0]:
            leases[f"d{next(ids)}"] = ("day", frozenset(spare[: storm[0]]), now, False)
            spare, storm = spare[storm[0] :], storm[1:]
        while requeues and spare and not storm:
            leases[f"r{next(ids)}"] = (requeues.pop(0), frozenset(spare[:1]), now, True)
            spare = spare[1:]
    assert bool(preempted) == (asked > 0)  # the storm did preempt
    for times in preempted.values():
        assert all(later - earlier >= minimum for earlier, later in itertools.pairwise(times))


@settings(max_examples=200, deadline=None)
@given(snapshots(), st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_each_victim_has_its_own_line(
    snapshot: tuple[frozenset[str], list[Candidate]], counts: list[int]
) -> None:
    """Every plan pairs each victim with the line that names it, whatever else it says."""
    free, candidates = snapshot
    waiters = [
        PreemptRequest(f"w{n}", f"u{n}", 2000 + n, count, frozenset(UNITS))
        for n, count in enumerate(counts)
    ]
    for plan in plan_queue(waiters, free, candidates):
        for victim, line in plan.reasons:
            assert line.startswith(f"preempting lease {victim.lease_id} of {victim.owner} for ")
        assert len(plan.reasons) == len(plan.victims)
