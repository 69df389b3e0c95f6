"""Who preempts whom: one pure rule, the reason of every decision in words (docs/preemption.md).

In: the preemptible leases (`Candidate`: the units each holds, how long it has run, its
minimum runtime, the work a preemption would lose) and what asks for room: the waiting
requests in the order the queue serves them, an advance reservation about to start, an admin.
Out: the leases to preempt now, those it counts on already, those it would preempt once their
minimum runtime has passed, and one line of explanation for each. No I/O and no clock: ages
are given in seconds.

The rule:
- only a request that may not itself be preempted preempts: a preemptible request never does,
  and a preempted job's requeue is preemptible, so no two jobs preempt each other in a loop;
- never a lease before its minimum runtime, never a lease of the requester, never a lease whose
  preemption is under way (its units are counted as coming instead);
- never more leases than the request needs: free units and units already coming count first,
  and of the sets of leases that make up the rest, the one that loses the least work (the
  GPU-seconds since each one's last acknowledged checkpoint, else since its grant), then the
  fewest leases, then the lowest lease ids (so the same snapshot always gives the same answer).
  Such a set is minimal: without any one of its leases it would no longer make room;
- requests are planned in the queue's order, each over what those before it did not claim.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpuallocd.model.durations import typed_duration

__all__ = [
    "AdminDecision",
    "Candidate",
    "Plan",
    "PreemptRequest",
    "admin_decision",
    "cover",
    "plan_queue",
    "reservation_victims",
]


@dataclass(frozen=True, slots=True)
class Candidate:
    """A preemptible lease as the rule sees it. `lost_seconds`: since its last acknowledged
    checkpoint (`checkpointed`), else since its grant; `notice_seconds`: from its warning to
    its deadline (lead + grace); `preempting`: its preemption is under way."""

    lease_id: str
    owner: str
    owner_uid: int
    units: frozenset[str]
    ran_seconds: float
    min_runtime_seconds: float
    lost_seconds: float
    checkpointed: bool = False
    notice_seconds: float = 0.0
    preempting: bool = False

    @property
    def eligible_in(self) -> float:
        """Seconds until its minimum runtime has passed (0: it may be preempted now)."""
        return max(0.0, self.min_runtime_seconds - self.ran_seconds)

    @property
    def work_lost(self) -> float:
        """What a preemption now would lose, in GPU-seconds."""
        return max(0.0, self.lost_seconds) * len(self.units)


@dataclass(frozen=True, slots=True)
class PreemptRequest:
    """A waiting request: `count` units among its `pool` (every unit that could serve it), the
    `named` ones among them; `preemptible`: it may itself be preempted once granted."""

    id: str
    owner: str
    owner_uid: int
    count: int
    pool: frozenset[str]
    named: frozenset[str] = frozenset()
    preemptible: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    """What one request does: preempt `victims` now; wait for `counted` (preemptions under
    way); or preempt `later` in `later_in` seconds, when their minimum runtime has passed."""

    request_id: str
    victims: tuple[Candidate, ...] = ()
    counted: tuple[Candidate, ...] = ()
    later: tuple[Candidate, ...] = ()
    later_in: float | None = None
    why: tuple[str, ...] = field(default=())

    @property
    def reasons(self) -> tuple[tuple[Candidate, str], ...]:
        """Each victim with the line that explains it (the last lines, one per victim)."""
        if not self.victims:
            return ()
        return tuple(zip(self.victims, self.why[-len(self.victims) :], strict=True))


def _ran(candidate: Candidate) -> str:
    since = "its last checkpoint" if candidate.checkpointed else "its grant"
    return (
        f"it ran {typed_duration(candidate.ran_seconds)}, past its minimum of "
        f"{typed_duration(candidate.min_runtime_seconds)}; "
        f"{typed_duration(candidate.lost_seconds)} of work since {since}"
    )


def _victim_line(candidate: Candidate, requester: str) -> str:
    return f"preempting lease {candidate.lease_id} of {candidate.owner} for {requester}: " + _ran(
        candidate
    )


def cover(
    candidates: Sequence[Candidate], pool: frozenset[str], need: int
) -> tuple[Candidate, ...] | None:
    """The set of `candidates` whose units in `pool` number at least `need`, losing the least
    work, then with the fewest leases, then the lowest ids; None where none does. A 0/1
    knapsack over `need` (small: a node has at most a few dozen units)."""
    if need <= 0:
        return ()
    best: list[tuple[float, int, tuple[str, ...], tuple[Candidate, ...]] | None] = [None] * (
        need + 1
    )
    best[0] = (0.0, 0, (), ())
    for candidate in sorted(candidates, key=lambda c: c.lease_id):
        gain = len(candidate.units & pool)
        if gain == 0:
            continue
        for have in range(need, -1, -1):
            found = best[have]
            if found is None:
                continue
            cost, count, ids, chosen = found
            reached = min(need, have + gain)
            option = (
                cost + candidate.work_lost,
                count + 1,
                (*ids, candidate.lease_id),
                (*chosen, candidate),
            )
            current = best[reached]
            if current is None or option[:3] < current[:3]:
                best[reached] = option
    done = best[need]
    return None if done is None else done[3]


def _units(candidates: Iterable[Candidate], pool: frozenset[str]) -> set[str]:
    return {unit for c in candidates for unit in c.units & pool}


def _claim(request: PreemptRequest, ordered: Sequence[Iterable[str]]) -> set[str]:
    """The `count` units a request will take: named first, then in the order given."""
    taken = set(request.named)
    for units in ordered:
        for unit in sorted(units):
            if len(taken) >= request.count:
                return taken
            taken.add(unit)
    return taken


def _plan_one(
    request: PreemptRequest,
    free: frozenset[str],
    candidates: Sequence[Candidate],
    claimed: set[str],
    chosen: set[str],
) -> Plan:
    pool = request.pool - claimed
    here = [c for c in candidates if c.units & pool and c.lease_id not in chosen]
    coming = [c for c in here if c.preempting]
    available = (free & pool) | _units(coming, pool)
    missing_named = request.named - available
    others = [c for c in here if not c.preempting and c.owner_uid != request.owner_uid]
    forced = [c for c in others if c.units & missing_named]
    unheld = (request.named - available) - _units(forced, pool)
    if unheld:
        ahead = unheld & claimed
        why = (
            f"{', '.join(sorted(ahead))} held for a request ahead of it"
            if ahead
            else f"{', '.join(sorted(unheld))} held by no lease that may be preempted"
        )
        claimed |= request.pool
        return Plan(request.id, counted=tuple(coming), why=(why,))
    optional = [c for c in others if c not in forced]
    need = request.count - len(available | _units(forced, pool))
    for wait in sorted({0.0, *(c.eligible_in for c in others)}):
        if any(c.eligible_in > wait for c in forced):
            continue
        rest = cover([c for c in optional if c.eligible_in <= wait], pool, need)
        if rest is None:
            continue
        victims = tuple(sorted((*forced, *rest), key=lambda c: c.lease_id))
        requester = f"{request.owner}'s request"
        chosen.update(c.lease_id for c in victims)  # for this request, now or later
        order = [free & pool, _units(coming, pool), _units(victims, pool)]
        claimed |= _claim(request, order)
        if wait > 0:
            lines = [
                f"will preempt lease {c.lease_id} of {c.owner} in {typed_duration(wait)}, when its "
                f"minimum runtime of {typed_duration(c.min_runtime_seconds)} has passed"
                for c in victims
            ]
            return Plan(
                request.id, counted=tuple(coming), later=victims, later_in=wait, why=tuple(lines)
            )
        lines = [f"counting on lease {c.lease_id} of {c.owner}, already preempted" for c in coming]
        lines += [_victim_line(c, requester) for c in victims]
        return Plan(request.id, victims=victims, counted=tuple(coming), why=tuple(lines))
    claimed |= request.pool
    return Plan(request.id, counted=tuple(coming), why=("no preemptible leases can make room",))


def plan_queue(
    requests: Sequence[PreemptRequest],
    free: frozenset[str],
    candidates: Sequence[Candidate],
) -> list[Plan]:
    """Each waiting request's plan, in the queue's order; a request that fits in what is free
    (and coming) preempts nothing, and claims what it will take from those behind it."""
    claimed: set[str] = set()
    chosen: set[str] = set()
    plans: list[Plan] = []
    candidates = sorted(candidates, key=lambda c: c.lease_id)
    for request in requests:
        if request.preemptible:
            claimed |= request.pool
            plans.append(Plan(request.id, why=("a preemptible request never preempts",)))
            continue
        plans.append(_plan_one(request, free, candidates, claimed, chosen))
    return plans


@dataclass(frozen=True, slots=True)
class AdminDecision:
    """An admin's preemption of one lease: allowed now (with its explanation), or not before
    `wait_seconds` have passed."""

    allowed: bool
    explanation: str
    wait_seconds: float = 0.0


def admin_decision(candidate: Candidate, admin: str) -> AdminDecision:
    """An admin may preempt a preemptible lease once its minimum runtime has passed."""
    if candidate.eligible_in > 0:
        return AdminDecision(
            False,
            f"lease {candidate.lease_id} of {candidate.owner} ran "
            f"{typed_duration(candidate.ran_seconds)} of its minimum of "
            f"{typed_duration(candidate.min_runtime_seconds)}",
            candidate.eligible_in,
        )
    return AdminDecision(True, _victim_line(candidate, f"{admin} (admin)"))


def reservation_victims(
    reservation: str,
    holder: str,
    units: frozenset[str],
    starts_in: float,
    candidates: Sequence[Candidate],
) -> list[tuple[Candidate, str]]:
    """The leases on a reservation's units whose preemption begins now: each as late as its
    notice allows (so its deadline is the reservation's start), never before its minimum
    runtime (a lease that reaches it later runs into the reservation, which waits for it, as
    for any lease). `candidates`: those the reservation does not admit."""
    found: list[tuple[Candidate, str]] = []
    for candidate in sorted(candidates, key=lambda c: c.lease_id):
        if candidate.preempting or not candidate.units & units:
            continue
        if starts_in > candidate.notice_seconds or candidate.eligible_in > 0:
            continue
        why = _victim_line(candidate, f"reservation {reservation} of {holder}")
        found.append((candidate, why))
    return found
