"""Leases as the daemon hands them out, and the events of their lives."""

from __future__ import annotations

import enum
import secrets
from dataclasses import dataclass
from typing import Any

from gpulease.lease_id import LEASE_ID_BYTES

from gpuallocd.model.energy import LeaseEnergy
from gpuallocd.model.preemption import PreemptTerms

__all__ = [
    "Caller",
    "HistoryEvent",
    "Lease",
    "LeaseEvent",
    "LeaseState",
    "LeasedGpu",
    "UnitKind",
    "lease_gpu_weight",
    "new_lease_id",
]


class LeaseState(str, enum.Enum):
    ACTIVE = "active"
    FREED = "freed"
    EXPIRED = "expired"
    REVOKED = "revoked"
    PREEMPTED = "preempted"  # ended by a preemption: at its checkpoint, or at the deadline


class LeaseEvent(str, enum.Enum):
    """Transitions recorded in the ledger's append-only history."""

    GRANTED = "granted"
    RENEWED = "renewed"
    FREED = "freed"
    EXPIRED = "expired"
    REVOKED = "revoked"
    WARNED = "warned"  # a memory share's processes used more than its size
    ENFORCED = "enforced"  # ... and were killed for it (share_enforcement = "kill")
    UNLEASED_USE = "unleased-use"  # someone without a lease uses the lease's GPU
    ADOPTED = "adopted"  # the lease was made for a process already running on its GPU
    UNHEALTHY = "unhealthy"  # a health failure (Xid) on the lease's GPU
    ENDING = "ending"  # the lease ends soon: a reason, a deadline (model/notice.py)
    PREEMPT_WARNING = "preempt_warning"  # it is preempted: the deadline (model/preemption.py)
    PREEMPT_SIGNAL = "preempt_signal"  # ... the chosen signal went to its processes
    CHECKPOINT_DONE = "checkpoint_done"  # its job acknowledged a checkpoint (the path given)
    PREEMPTED = "preempted"  # ... and it ended for the preemption


ENDING_EVENT = {
    LeaseState.FREED: LeaseEvent.FREED,
    LeaseState.EXPIRED: LeaseEvent.EXPIRED,
    LeaseState.REVOKED: LeaseEvent.REVOKED,
    LeaseState.PREEMPTED: LeaseEvent.PREEMPTED,
}
# The history events that end a lease, by the name the ledger records.
ENDINGS = frozenset(event.value for event in ENDING_EVENT.values())


def new_lease_id() -> str:
    """A fresh lease id, in the one format of gpulease/lease_id.py (12 hex digits)."""
    return secrets.token_hex(LEASE_ID_BYTES)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, as the kernel says (SO_PEERCRED), never as the request says."""

    uid: int
    gid: int
    pid: int
    user: str
    groups: frozenset[str] = frozenset()  # names of the user's groups, from the user database

    @property
    def is_root(self) -> bool:
        return self.uid == 0


class UnitKind(str, enum.Enum):
    """What a lease holds of one GPU: all of it, one MIG instance, or a share of its memory."""

    WHOLE = "whole"
    MIG = "mig"
    SHARE = "share"


@dataclass(frozen=True, slots=True)
class LeasedGpu:
    """One leased unit: `uuid` is what CUDA_VISIBLE_DEVICES gets (a GPU's or a `MIG-` UUID).

    `index` is the physical GPU's index (a display). `parent` is the physical GPU's UUID
    where the unit is part of one (a MIG instance, an AMD compute partition). A memory share
    has `memory_bytes`. `fraction` is the part of its physical GPU the unit stands for
    (1.0 whole; memory share / GPU memory; an instance's memory / its GPU's).
    """

    uuid: str
    index: int
    kind: UnitKind = UnitKind.WHOLE
    parent: str | None = None
    memory_bytes: int | None = None
    profile: str | None = None
    fraction: float = 1.0

    @property
    def gpu_uuid(self) -> str:
        """The physical GPU this unit is on."""
        return self.parent or self.uuid

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "kind": self.kind.value,
            "parent_uuid": self.parent,
            "memory_bytes": self.memory_bytes,
            "mig_profile": self.profile,
            "fraction": self.fraction,
        }


@dataclass(frozen=True, slots=True)
class Lease:
    id: str
    gpus: tuple[LeasedGpu, ...]
    owner_uid: int
    owner_name: str
    pid: int | None
    label: str | None
    policy: str
    created_at: float
    expires_at: float
    state: LeaseState = LeaseState.ACTIVE
    ended_at: float | None = None
    bound: bool = False  # ends when the process `pid` (started at `pid_start_time`) exits
    pid_start_time: int | None = None
    waited_seconds: float = 0.0  # how long the request waited in the queue before its grant
    power_limit_watts: float | None = None  # the GPUs' power cap (docs/accounting.md)
    on_revoke: str = "notify"  # "terminate": a revoke stops the lease's processes
    preemptible: PreemptTerms | None = None  # may be preempted, on these terms (preemption.md)
    # bound: when the holder exits, the owner's processes carrying the lease's id keep it
    follow_work: bool = False
    # the cap asked for, where the cards took another (kept within their range); else None
    power_limit_requested_watts: float | None = None

    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(g.uuid for g in self.gpus)

    @property
    def active(self) -> bool:
        return self.state is LeaseState.ACTIVE

    def ended(self, state: LeaseState, at: float) -> Lease:
        """This lease in `state` from `at`; every other field as it is. Written out rather
        than `dataclasses.replace`, which costs a fifth of a free's own Python on this path
        (tests/test_lease_model.py holds it to every field)."""
        return Lease(
            self.id,
            self.gpus,
            self.owner_uid,
            self.owner_name,
            self.pid,
            self.label,
            self.policy,
            self.created_at,
            self.expires_at,
            state,
            at,
            self.bound,
            self.pid_start_time,
            self.waited_seconds,
            self.power_limit_watts,
            self.on_revoke,
            self.preemptible,
            self.follow_work,
            self.power_limit_requested_watts,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "gpus": [g.to_json() for g in self.gpus],
            "owner": {"uid": self.owner_uid, "user": self.owner_name},
            "pid": self.pid,
            "label": self.label,
            "policy": self.policy,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "state": self.state.value,
            "ended_at": self.ended_at,
            "bound_to_process": self.bound,
            "waited_seconds": self.waited_seconds,
            "power_limit_watts": self.power_limit_watts,
            "power_limit_requested_watts": self.power_limit_requested_watts,
            "on_revoke": self.on_revoke,
            "preemptible": None if self.preemptible is None else self.preemptible.to_json(),
            "follow_work": self.follow_work,
        }


def lease_gpu_weight(lease: Lease) -> float:
    """How many GPUs a lease counts for: 1.0 per whole GPU, a share or slice its fraction."""
    return sum(g.fraction for g in lease.gpus)


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    seq: int
    lease_id: str
    event: LeaseEvent
    actor_uid: int
    at: float
    detail: str | None
    energy: LeaseEnergy | None = None  # an end event's: what the lease drew

    def to_json(self, actor_name: str | None = None) -> dict[str, Any]:
        """`actor` names who acted as admin actions do (`actor_name`, else the uid as text);
        `actor_uid` stays for older readers."""
        return {
            "seq": self.seq,
            "lease_id": self.lease_id,
            "event": self.event.value,
            "actor": {"uid": self.actor_uid, "user": actor_name or str(self.actor_uid)},
            "actor_uid": self.actor_uid,
            "at": self.at,
            "detail": self.detail,
            "energy": None if self.energy is None else self.energy.to_json(),
        }
