"""What preemption keeps in memory: each preemptible lease's clock (when it started, when its
job last acknowledged a checkpoint) and each open preemption with its times on the monotonic
clock. Rebuilt from the ledger at start; the ledger's wall times become monotonic ones the way
lease deadlines do (leases/deadlines.py): what was left by the wall clock, from now on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from gpuallocd.model import Lease, Preemption

__all__ = ["OpenPreemption", "PreemptionBook"]

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class OpenPreemption:
    """A preemption under way: its record, and when its signal and deadline come (monotonic)."""

    record: Preemption
    signal_at: float
    deadline_at: float


class PreemptionBook:
    """Preemptible leases' clocks and the open preemptions."""

    def __init__(self, wall: Clock, monotonic: Clock) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self._started: dict[str, float] = {}  # preemptible lease -> monotonic start
        self._checkpointed: dict[str, tuple[float, float, str | None]] = {}  # mono, wall, path
        self._open: dict[str, OpenPreemption] = {}

    def _mono(self, wall_at: float) -> float:
        """A wall-clock time as the monotonic clock reads it now."""
        return self._monotonic() - (self._wall() - wall_at)

    # Preemptible leases ------------------------------------------------------------------

    def track(self, lease: Lease) -> None:
        """A preemptible lease, granted now or read from the ledger at start."""
        if lease.preemptible is not None and lease.id not in self._started:
            self._started[lease.id] = self._mono(lease.created_at)

    def forget(self, lease_id: str) -> OpenPreemption | None:
        """The lease ended; its open preemption, if it had one."""
        self._started.pop(lease_id, None)
        self._checkpointed.pop(lease_id, None)
        return self._open.pop(lease_id, None)

    def tracked(self) -> list[str]:
        return list(self._started)

    def ran(self, lease_id: str) -> float:
        return self._monotonic() - self._started[lease_id]

    def checkpointed(self, lease_id: str, wall_at: float, path: str | None) -> None:
        if lease_id in self._started:
            self._checkpointed[lease_id] = (self._mono(wall_at), wall_at, path)

    def last_checkpoint(self, lease_id: str) -> tuple[float, str | None] | None:
        """The wall time and path of the lease's last acknowledged checkpoint."""
        found = self._checkpointed.get(lease_id)
        return None if found is None else (found[1], found[2])

    def lost(self, lease_id: str) -> tuple[float, bool]:
        """Seconds of work a preemption now would lose, and whether a checkpoint counts."""
        found = self._checkpointed.get(lease_id)
        since = self._started[lease_id] if found is None else found[0]
        return self._monotonic() - since, found is not None

    # Open preemptions ---------------------------------------------------------------------

    def open(self, record: Preemption, *, lead: float | None = None, grace: float = 0) -> None:
        """A preemption decided now (`lead` and `grace` from now), or read from the ledger
        (its recorded wall times)."""
        if lead is None:
            signal_at, deadline_at = self._mono(record.signal_at), self._mono(record.deadline_at)
        else:
            now = self._monotonic()
            signal_at, deadline_at = now + lead, now + lead + grace
        self._open[record.lease_id] = OpenPreemption(record, signal_at, deadline_at)

    def drop(self, lease_id: str) -> None:
        """An open preemption the ledger does not have (its commit failed)."""
        self._open.pop(lease_id, None)

    def update(self, record: Preemption) -> None:
        found = self._open.get(record.lease_id)
        if found is not None:
            self._open[record.lease_id] = replace(found, record=record)

    def get(self, lease_id: str) -> OpenPreemption | None:
        return self._open.get(lease_id)

    def __iter__(self) -> Iterator[OpenPreemption]:
        return iter(list(self._open.values()))

    def __len__(self) -> int:
        return len(self._open)

    def left(self, entry: OpenPreemption) -> float:
        """Seconds until its deadline (below 0 once passed)."""
        return entry.deadline_at - self._monotonic()

    def signal_due(self, entry: OpenPreemption) -> bool:
        return entry.record.signalled_at is None and self._monotonic() >= entry.signal_at

    def deadline_passed(self, entry: OpenPreemption) -> bool:
        return self._monotonic() >= entry.deadline_at
