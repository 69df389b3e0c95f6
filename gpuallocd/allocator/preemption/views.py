"""What preemption adds to what people see: for each waiter, the preemptions it waits for
and those it will make once a minimum runtime has passed ("will preempt lease 3f2a of alice
at 14:02"), as the last plan left them; a lease's and a GPU's preemption. Pure bookkeeping;
nothing here decides.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuallocd.allocator.preemption.book import PreemptionBook
from gpuallocd.model import Lease
from gpuallocd.policies.preemption import Plan

__all__ = ["PlanNotes", "WaiterNote", "gpu_marks", "lease_extra"]


def _clock(at: float) -> str:
    return time.strftime("%H:%M", time.localtime(at))


@dataclass(frozen=True, slots=True)
class WaiterNote:
    """One waiter's preemptions: (lease, owner, wall time) each; `why` in the rule's words."""

    preempting: tuple[tuple[str, str, float], ...]
    later: tuple[tuple[str, str, float], ...]
    why: tuple[str, ...]
    later_ends_by: float | None = None  # the later preemptions' deadlines, the latest

    def to_json(self) -> dict[str, Any]:
        return {
            "preempting": [
                {"lease_id": i, "user": u, "deadline_at": at} for i, u, at in self.preempting
            ],
            "will_preempt": [{"lease_id": i, "user": u, "at": at} for i, u, at in self.later],
            "preemption_why": list(self.why),
        }

    def start_by(self) -> float | None:
        """When the room it waits for is made at the latest: the last deadline of the
        preemptions under way, or of those it will make (each ends by its notice)."""
        ends = [at for _, _, at in self.preempting]
        if self.later_ends_by is not None:
            ends.append(self.later_ends_by)
        return max(ends) if ends else None

    def text(self) -> str:
        """In the queue's reason: `preempting lease 3f2a of alice (ends by 14:07)`."""
        parts = [
            f"preempting lease {i} of {u} (ends by {_clock(at)})" for i, u, at in self.preempting
        ]
        parts += [f"will preempt lease {i} of {u} at {_clock(at)}" for i, u, at in self.later]
        return "; ".join(parts)


class PlanNotes:
    """The notes of the last plan, by waiter id."""

    def __init__(self) -> None:
        self._notes: dict[str, WaiterNote] = {}

    def clear(self) -> None:
        self._notes = {}

    def planned(self, plans: Sequence[Plan], now: float, book: PreemptionBook) -> None:
        notes: dict[str, WaiterNote] = {}
        for plan in plans:
            preempting = []
            for candidate in plan.counted:
                entry = book.get(candidate.lease_id)
                if entry is not None:
                    preempting.append(
                        (candidate.lease_id, candidate.owner, entry.record.deadline_at)
                    )
            preempting += [(c.lease_id, c.owner, now + c.notice_seconds) for c in plan.victims]
            at = now + (plan.later_in or 0.0)
            later = tuple((c.lease_id, c.owner, at) for c in plan.later)
            ends = max((at + c.notice_seconds for c in plan.later), default=None)
            if preempting or later:
                notes[plan.request_id] = WaiterNote(tuple(preempting), later, plan.why, ends)
        self._notes = notes

    def of(self, waiter_id: str) -> WaiterNote | None:
        return self._notes.get(waiter_id)


def lease_extra(book: PreemptionBook, lease_id: str) -> dict[str, Any] | None:
    """An active lease's preemption under way and its last checkpoint, for `leases`,
    `status` and the lease's own answers (from memory)."""
    entry = book.get(lease_id)
    checkpoint = book.last_checkpoint(lease_id)
    found: dict[str, Any] = {}
    if entry is not None:
        found["preemption"] = {**entry.record.to_json(), "left_seconds": book.left(entry)}
    if checkpoint is not None:
        found["last_checkpoint"] = {"at": checkpoint[0], "path": checkpoint[1]}
    return found or None


def gpu_marks(book: PreemptionBook, lease: Lease | None) -> dict[str, Any]:
    """What `status` and the dashboard add to a GPU held by `lease`: `preemptible`, and its
    `preemption` under way (None: none)."""
    if lease is None or lease.preemptible is None:
        return {}
    entry = book.get(lease.id)
    return {"preemptible": True, "preemption": None if entry is None else entry.record.to_json()}
