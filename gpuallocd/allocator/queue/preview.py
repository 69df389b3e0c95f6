"""A request's dry run (`POST /v1/leases/preview`): what `allocate` would do now, as data.

The answer comes from allocate's own code run without its writes (`WaitQueue.preview`, then
`LeaseLifecycle.preview`): the claim of the waiters ahead, the request's bounds, limits,
budgets, drains, reservations, the policy's checked choice and the power budget. One of
three outcomes: `granted` (the GPUs and terms a grant would record), `waits` (it would queue:
asked with `wait` and not refused), `refused` (the error allocate would answer, with its
code). Where it does not fit now, the estimate is the queue's own for the waiter it would be
(`view.py`): its place, why it would wait, when it may start and the leases it waits for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuallocd.allocator.leases.node_view import GpuStatus
from gpuallocd.allocator.power.caps import CardCap
from gpuallocd.allocator.queue.view import WaitInfo
from gpuallocd.errors import GpuallocError
from gpuallocd.model import Lease

__all__ = ["Preview", "WouldWait", "waited_for"]


@dataclass(frozen=True, slots=True)
class WouldWait:
    """The waiter the request would be: its place (from 1), the queue's words and estimate,
    the GPUs' statuses of the leases it waits for (soonest end first)."""

    position: int
    info: WaitInfo
    waiting_for: Sequence[Sequence[GpuStatus]] = ()  # by lease

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "waiters_ahead": self.position - 1,
            "reason": self.info.reason,
            "reason_detail": self.info.detail,
            "estimated_start_at": self.info.estimated_start_at,
            "waiting_for": [_held(statuses) for statuses in self.waiting_for],
        }


def _held(statuses: Sequence[GpuStatus]) -> dict[str, Any]:
    """A lease waited for, as `status` shows it to anyone: its GPUs the request could use,
    its holder, label and end."""
    lease = statuses[0].lease
    assert lease is not None  # waited_for keeps leased GPUs only
    return {
        "gpus": [{"uuid": s.gpu.uuid, "index": s.gpu.index} for s in statuses],
        "holder": {"uid": lease.owner_uid, "user": lease.owner_name},
        "label": lease.label,
        "expires_at": lease.expires_at,
    }


@dataclass(frozen=True, slots=True)
class Preview:
    """What allocate would do now: a grant's lease (never recorded), or the refusal, and
    where it would not be granted now, the waiter it would be."""

    policy: str
    wait: bool
    lease: Lease | None = None
    refusal: GpuallocError | None = None
    would_wait: WouldWait | None = None
    caps: Sequence[CardCap] = field(default_factory=tuple)
    retry_of: str | None = None  # the active lease an earlier request with its id got

    @property
    def outcome(self) -> str:
        if self.lease is not None:
            return "granted"
        return "refused" if self.refusal is not None else "waits"

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "policy": self.policy if self.lease is None else self.lease.policy,
            **_granted(self.lease, self.caps),
            "retry_of": self.retry_of,
            "refusal": None if self.refusal is None else _refusal(self.refusal),
            "would_wait": None if self.would_wait is None else self.would_wait.to_json(),
        }


def _granted(lease: Lease | None, caps: Sequence[CardCap]) -> dict[str, Any]:
    """The GPUs and terms a grant would record (empty where it would not be granted now)."""
    if lease is None:
        return {
            "gpus": [],
            "ttl_seconds": None,
            "expires_at": None,
            "power_limit_watts": None,
            "power_caps": [],
            "preemptible": None,
        }
    return {
        "gpus": [unit.to_json() for unit in lease.gpus],
        "ttl_seconds": lease.expires_at - lease.created_at,
        "expires_at": lease.expires_at,
        "power_limit_watts": lease.power_limit_watts,
        "power_caps": [_cap(cap, lease) for cap in caps],
        "preemptible": None if lease.preemptible is None else lease.preemptible.to_json(),
    }


def _cap(cap: CardCap, lease: Lease) -> dict[str, Any]:
    index = next(unit.index for unit in lease.gpus if unit.uuid == cap.uuid)
    return {"uuid": cap.uuid, "index": index, "limit_mw": cap.limit_mw, "clamped": cap.clamped}


def _refusal(error: GpuallocError) -> dict[str, Any]:
    """The error allocate would answer: its envelope's body and its HTTP status."""
    return {**error.to_envelope()["error"], "status": error.http_status}


def waited_for(
    statuses: Sequence[GpuStatus], pool: frozenset[str], start: float | None
) -> list[list[GpuStatus]]:
    """The leases on GPUs of `pool` that end by `start` (the estimated start), soonest first,
    each with its GPUs of the pool: what the request would wait for (none without an
    estimate)."""
    if start is None:
        return []
    by_lease: dict[str, list[GpuStatus]] = {}
    for status in sorted(statuses, key=lambda s: s.gpu.index):
        lease = status.lease
        if lease is not None and status.gpu.uuid in pool and lease.expires_at <= start:
            by_lease.setdefault(lease.id, []).append(status)
    return sorted(by_lease.values(), key=lambda held: _end(held[0]))


def _end(status: GpuStatus) -> float:
    return 0.0 if status.lease is None else status.lease.expires_at
