"""Leases as the daemon hands them out, and the events of their lives."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["Caller", "HistoryEvent", "Lease", "LeaseEvent", "LeaseState", "LeasedGpu"]


class LeaseState(str, enum.Enum):
    ACTIVE = "active"
    FREED = "freed"
    EXPIRED = "expired"
    REVOKED = "revoked"


class LeaseEvent(str, enum.Enum):
    """Transitions recorded in the ledger's append-only history."""

    GRANTED = "granted"
    RENEWED = "renewed"
    FREED = "freed"
    EXPIRED = "expired"
    REVOKED = "revoked"


ENDING_EVENT = {
    LeaseState.FREED: LeaseEvent.FREED,
    LeaseState.EXPIRED: LeaseEvent.EXPIRED,
    LeaseState.REVOKED: LeaseEvent.REVOKED,
}


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


@dataclass(frozen=True, slots=True)
class LeasedGpu:
    uuid: str
    index: int


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

    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(g.uuid for g in self.gpus)

    @property
    def active(self) -> bool:
        return self.state is LeaseState.ACTIVE

    def ended(self, state: LeaseState, at: float) -> Lease:
        return replace(self, state=state, ended_at=at)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "gpus": [{"index": g.index, "uuid": g.uuid} for g in self.gpus],
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
        }


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    seq: int
    lease_id: str
    event: LeaseEvent
    actor_uid: int
    at: float
    detail: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "lease_id": self.lease_id,
            "event": self.event.value,
            "actor_uid": self.actor_uid,
            "at": self.at,
            "detail": self.detail,
        }
