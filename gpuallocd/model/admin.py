"""What admins do to the node: drained GPUs, and the record of every admin action."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = ["AdminAction", "AdminActionKind", "Drain"]


class AdminActionKind(str, enum.Enum):
    REVOKE = "revoke"
    DRAIN = "drain"
    UNDRAIN = "undrain"
    RECOVER = "recover"  # `gpuallocd --recover` rebuilt the ledger; the reason lists what was lost
    PREEMPT = "preempt"  # `gpuallocctl preempt LEASE` (docs/preemption.md)


@dataclass(frozen=True, slots=True)
class Drain:
    """A GPU an admin took out of service: no new lease on it until undrained."""

    gpu_uuid: str
    reason: str
    by: str  # the admin's user name
    by_uid: int
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "by": self.by, "at": self.at}


@dataclass(frozen=True, slots=True)
class AdminAction:
    """One admin action as the ledger keeps it: who did what to which lease or GPU, and why."""

    seq: int
    at: float
    action: AdminActionKind
    target: str  # a lease id (revoke, preempt) or a GPU UUID (drain, undrain)
    actor_uid: int
    actor: str
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at": self.at,
            "action": self.action.value,
            "target": self.target,
            "actor": {"uid": self.actor_uid, "user": self.actor},
            "reason": self.reason,
        }
