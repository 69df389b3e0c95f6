"""Preemptible leases and their preemptions (docs/preemption.md): the terms a lease is granted
with, and the record of one preemption from its warning to its end.

A preemptible lease may be ended for someone else's request, an advance reservation or an
admin, never before its minimum runtime, on a contract: a `preempt_warning` event on its own
stream with the deadline; `lead_seconds` later the chosen signal to its processes; the lease
ends when the job acknowledges a checkpoint (`checkpoint_done`) or at the deadline,
`grace_seconds` after the signal, when what is left of its processes is killed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_SIGNAL",
    "OPEN_STATES",
    "SIGNALS",
    "PreemptTerms",
    "PreemptTrigger",
    "Preemption",
    "PreemptionState",
]

# The signals a preemptible lease may choose (`--signal`, as Slurm's); each one a job can
# catch, none that stops or kills outright.
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGXCPU")
DEFAULT_SIGNAL = "SIGTERM"


@dataclass(frozen=True, slots=True)
class PreemptTerms:
    """What a preemptible lease was granted with (bounded by the site's limits at the grant,
    fixed for the lease's life). `queued_since`: the wall time its request first queued (a
    requeue keeps its place by it); `requeue_of`: the preempted lease it requeues."""

    min_runtime_seconds: float
    lead_seconds: float
    grace_seconds: float
    signal: str = DEFAULT_SIGNAL
    queued_since: float = 0.0
    requeue_of: str | None = None

    @property
    def notice_seconds(self) -> float:
        """From the warning to the deadline."""
        return self.lead_seconds + self.grace_seconds

    def to_json(self) -> dict[str, Any]:
        return {
            "min_runtime_seconds": self.min_runtime_seconds,
            "lead_seconds": self.lead_seconds,
            "grace_seconds": self.grace_seconds,
            "signal": self.signal,
            "queued_since": self.queued_since,
            "requeue_of": self.requeue_of,
        }


class PreemptTrigger(str, enum.Enum):
    """Who asked for a preemption."""

    REQUEST = "request"  # a waiting request that fits only if preemptible leases end
    RESERVATION = "reservation"  # an advance reservation of the lease's GPUs starts
    ADMIN = "admin"  # `gpuallocctl preempt LEASE`


class PreemptionState(str, enum.Enum):
    WARNED = "warned"  # the warning is out; the signal comes at `signal_at`
    SIGNALLED = "signalled"  # the signal went out; the lease ends by `deadline_at`
    ACKNOWLEDGED = "acknowledged"  # the job acknowledged a checkpoint: the lease ended then
    KILLED = "killed"  # the deadline passed: the lease ended, what was left of it killed
    ENDED = "ended"  # the lease ended otherwise meanwhile (freed, its processes exited, ...)


OPEN_STATES = frozenset({PreemptionState.WARNED, PreemptionState.SIGNALLED})


@dataclass(frozen=True, slots=True)
class Preemption:
    """One preemption of one lease; times are wall-clock (Unix time), for people and for a
    restart, which resumes it with the same deadline."""

    lease_id: str
    owner_uid: int
    owner_name: str
    trigger: PreemptTrigger
    for_user: str  # whose request, reservation or admin
    explanation: str
    decided_at: float
    signal_at: float
    deadline_at: float
    signal: str = DEFAULT_SIGNAL
    for_uid: int | None = None
    state: PreemptionState = PreemptionState.WARNED
    signalled_at: float | None = None
    ended_at: float | None = None
    acknowledged_at: float | None = None
    checkpoint: str | None = None
    late: bool = False  # an acknowledgement after the deadline (recorded, changes nothing)

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    def to_json(self) -> dict[str, Any]:
        return {
            "lease_id": self.lease_id,
            "trigger": self.trigger.value,
            "for": self.for_user,
            "for_uid": self.for_uid,
            "explanation": self.explanation,
            "decided_at": self.decided_at,
            "signal": self.signal,
            "signal_at": self.signal_at,
            "deadline_at": self.deadline_at,
            "state": self.state.value,
            "signalled_at": self.signalled_at,
            "ended_at": self.ended_at,
            "acknowledged_at": self.acknowledged_at,
            "checkpoint": self.checkpoint,
            "late": self.late,
        }
