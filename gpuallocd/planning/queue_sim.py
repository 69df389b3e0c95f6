"""`simulate` of a timed trace: jobs that users submit, each holding its GPUs for a while,
served by the wait queue under `fifo` and under `fair-share`, side by side.

    {"op": "submit", "id": "j1", "user": "ana", "at": 0, "count": 2, "duration": 3600}

`at` (seconds from the trace's start) is when the job asks, with `wait`; `duration` how long
it holds its GPUs once granted; `count` GPUs (or `gpus`, by index). The queue is served as the
daemon serves it: in order (arrival, or fair-share priority from `policies.fair_share` over
the decayed GPU-hours of the jobs so far), each waiter that fits granted by the policy, one
that does not fit holding the GPUs it could use from those behind it. Pure: no clock, no I/O.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuallocd.errors import CapacityError, TraceError
from gpuallocd.model import LeaseSpan, Topology
from gpuallocd.policies.base import GpuView, NodeSnapshot, Policy
from gpuallocd.policies.fair_share import FairShareWaiter, decayed_gpu_hours, fair_share_order
from gpuallocd.policies.rules import check_choice, request_for
from gpuallocd.policies.serving import serve_in_order

__all__ = ["Job", "OrderResult", "is_job_trace", "read_jobs", "simulate_orders"]

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    user: str
    at: float
    duration: float
    count: int
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class UserWaits:
    user: str
    jobs: int
    served: int
    p50_wait: float
    p95_wait: float
    max_wait: float

    def to_json(self) -> dict[str, Any]:
        return {
            "user": self.user,
            "jobs": self.jobs,
            "served": self.served,
            "p50_wait_seconds": self.p50_wait,
            "p95_wait_seconds": self.p95_wait,
            "max_wait_seconds": self.max_wait,
        }


@dataclass(frozen=True, slots=True)
class OrderResult:
    """One order's run: waits per user and in all, and how busy the GPUs were."""

    order: str
    users: tuple[UserWaits, ...]
    p50_wait: float
    p95_wait: float
    utilisation: float  # busy GPU-seconds / (GPUs x span from first submit to last end)
    makespan: float

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "users": [u.to_json() for u in self.users],
            "p50_wait_seconds": self.p50_wait,
            "p95_wait_seconds": self.p95_wait,
            "utilisation": self.utilisation,
            "makespan_seconds": self.makespan,
        }


# Reading ------------------------------------------------------------------------------------


def is_job_trace(lines: Sequence[str]) -> bool:
    """Whether the trace's first operation is a `submit` (a timed trace)."""
    for text in lines:
        if text.strip():
            try:
                item = json.loads(text)
            except json.JSONDecodeError:
                return False
            return isinstance(item, dict) and item.get("op") == "submit"
    return False


def _number(line: int, item: dict[str, Any], key: str, minimum: float) -> float:
    value = item.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        value = math.nan
    if not (math.isfinite(value) and value >= minimum):
        raise TraceError(line, f"'{key}' must be a number of seconds of at least {minimum:g}")
    return float(value)


def _job(line: int, text: str) -> Job:
    try:
        item = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(line, f"not JSON: {exc.msg}") from exc
    if not isinstance(item, dict) or item.get("op") != "submit":
        raise TraceError(line, "a timed trace has only 'submit' operations")
    job_id, user = item.get("id"), item.get("user")
    if not (isinstance(job_id, str) and job_id and isinstance(user, str) and user):
        raise TraceError(line, "'id' and 'user' must be non-empty strings")
    gpus = item.get("gpus") or []
    if not (isinstance(gpus, list) and all(isinstance(g, int) and g >= 0 for g in gpus)):
        raise TraceError(line, "'gpus' must be a list of GPU indices")
    count = item.get("count", len(gpus) or 1)
    if not (isinstance(count, int) and count >= max(1, len(gpus))):
        raise TraceError(line, "'count' must be an integer of at least 1 (and of the 'gpus')")
    at, duration = _number(line, item, "at", 0.0), _number(line, item, "duration", 1.0)
    return Job(job_id, user, at, duration, count, tuple(gpus))


def read_jobs(lines: Iterable[str]) -> list[Job]:
    """The jobs of a timed trace, in the order they are submitted (ties: trace order)."""
    jobs = [_job(n, text) for n, text in enumerate(lines, start=1) if text.strip()]
    if len({j.id for j in jobs}) != len(jobs):
        raise TraceError(0, "job ids must be unique")
    return sorted(jobs, key=lambda j: j.at)


# Running ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Waiting:
    job: Job
    seq: int

    @property
    def id(self) -> str:
        return self.job.id


class _Node:
    """The GPUs, who holds which, and the spans held so far (for fair share)."""

    def __init__(self, topology: Topology, policy: Policy) -> None:
        self.topology, self.policy = topology, policy
        self.busy: set[str] = set()
        self.uuid = {g.index: g.uuid for g in topology.gpus}
        self.spans: list[LeaseSpan] = []
        self.users: dict[str, int] = {}

    def snapshot(self, unavailable: set[str]) -> NodeSnapshot:
        views = {
            g.uuid: GpuView(gpu=g, free=g.uuid not in self.busy and g.uuid not in unavailable)
            for g in self.topology.gpus
        }
        return NodeSnapshot(topology=self.topology, views=views)

    def usable(self, job: Job) -> set[str]:
        if job.gpus and job.count == len(job.gpus):
            return {self.uuid[i] for i in job.gpus}
        return set(self.uuid.values())

    def try_grant(self, job: Job, blocked: set[str]) -> frozenset[str] | None:
        request = request_for(self.topology, job.count, job.gpus)
        snapshot = self.snapshot(blocked)
        try:
            choice = self.policy.choose(snapshot, request)
            check_choice(self.policy.name, choice, request, snapshot)
        except CapacityError:
            return None
        return frozenset(choice.gpus)

    def span(self, job: Job, start: float, end: float | None) -> LeaseSpan:
        uid = self.users.setdefault(job.user, len(self.users) + 1)
        return LeaseSpan(uid, job.user, float(job.count), start, end)


def _ordered(
    waiting: list[_Waiting],
    node: _Node,
    running: Sequence[tuple[float, int, Job, float]],
    now: float,
    fair: bool,
    half_life_hours: float,
    weight: float,
) -> list[_Waiting]:
    if not fair:
        return list(waiting)  # a copy: the caller removes those it grants
    spans = node.spans + [node.span(job, start, None) for _, _, job, start in running]
    usage = decayed_gpu_hours(spans, now, half_life_hours)
    entries = [FairShareWaiter(w.id, w.job.user, w.job.at) for w in waiting]
    by_id = {w.id: w for w in waiting}
    return [
        by_id[p.waiter_id] for p in fair_share_order(entries, usage, now=now, wait_weight=weight)
    ]


def _run(
    topology: Topology,
    policy: Policy,
    jobs: Sequence[Job],
    *,
    fair: bool,
    half_life_hours: float,
    weight: float,
) -> tuple[dict[str, float], float, float]:
    """Each job's wait (seconds), the busy GPU-seconds, and when the last job ended."""
    node = _Node(topology, policy)
    waits: dict[str, float] = {}
    running: list[tuple[float, int, Job, float]] = []  # (end, order of grant, job, start)
    holding: dict[str, frozenset[str]] = {}
    waiting: list[_Waiting] = []
    pending = list(jobs)
    now = 0.0
    busy_seconds = 0.0
    while pending or waiting or running:
        upcoming = [pending[0].at] if pending else []
        upcoming += [running[0][0]] if running else []
        if not upcoming:
            break  # waiters that can never be served
        at = min(upcoming)
        busy_seconds += len(node.busy) * (at - now)
        now = at
        while running and running[0][0] <= now:
            end, _, job, start = heapq.heappop(running)
            node.busy -= holding.pop(job.id)
            node.spans.append(node.span(job, start, end))
        while pending and pending[0].at <= now:
            waiting.append(_Waiting(pending.pop(0), len(waits) + len(waiting)))

        def grant(entry: _Waiting, held: frozenset[str], now: float = now) -> frozenset[str] | None:
            gpus = node.try_grant(entry.job, set(held))
            if gpus is not None:
                waiting.remove(entry)
                node.busy |= gpus
                holding[entry.job.id] = gpus
                waits[entry.job.id] = now - entry.job.at
                heapq.heappush(running, (now + entry.job.duration, len(waits), entry.job, now))
            return gpus

        ordered = _ordered(waiting, node, running, now, fair, half_life_hours, weight)
        serve_in_order(ordered, grant, lambda entry: node.usable(entry.job))
    return waits, busy_seconds, now


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, math.ceil(q * len(ordered)) - 1)
    return ordered[rank]


def _result(
    order: str, jobs: Sequence[Job], run: tuple[dict[str, float], float, float], gpus: int
) -> OrderResult:
    waits, busy, end = run
    users: list[UserWaits] = []
    for user in sorted({j.user for j in jobs}):
        mine = [waits[j.id] for j in jobs if j.user == user and j.id in waits]
        total = sum(j.user == user for j in jobs)
        users.append(
            UserWaits(
                user, total, len(mine), _percentile(mine, 0.5), _percentile(mine, 0.95),
                max(mine, default=0.0),
            )
        )  # fmt: skip
    start = min((j.at for j in jobs), default=0.0)
    span = max(end - start, 1e-9)
    every = list(waits.values())
    return OrderResult(
        order=order,
        users=tuple(users),
        p50_wait=_percentile(every, 0.5),
        p95_wait=_percentile(every, 0.95),
        utilisation=busy / (gpus * span),
        makespan=span,
    )


def simulate_orders(
    topology: Topology,
    policy: Policy,
    jobs: Sequence[Job],
    *,
    half_life_hours: float = 168.0,
    wait_weight: float = 1.0,
) -> tuple[OrderResult, OrderResult]:
    """The same jobs under `fifo` and under `fair-share`."""
    results = []
    for order, fair in (("fifo", False), ("fair-share", True)):
        run = _run(
            topology, policy, jobs, fair=fair, half_life_hours=half_life_hours, weight=wait_weight
        )
        results.append(_result(order, jobs, run, len(topology.gpus)))
    return results[0], results[1]
