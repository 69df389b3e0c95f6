"""Idle leases: which leases hold GPUs that nobody uses, and which of them to take back.

Pure: the tracker is fed live samples with the time they were taken and answers from them
alone. A lease is idle while every one of its GPUs shows no process and 0% utilisation; a
GPU whose utilisation the backend cannot read is never idle (unknown is not idle). A lease
idle for `reclaim_seconds` is reported to its holder; once it has been idle a further
`grace_seconds` it may be revoked, but only for someone waiting for a GPU it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpuallocd.model import Lease, LiveState

__all__ = ["IdleNotice", "IdleRules", "IdleTracker", "gpu_is_idle"]


@dataclass(frozen=True, slots=True)
class IdleRules:
    """`reclaim_seconds` None: idle reclaim is off."""

    reclaim_seconds: float | None = None
    grace_seconds: float = 600.0

    @property
    def enabled(self) -> bool:
        return self.reclaim_seconds is not None


@dataclass(frozen=True, slots=True)
class IdleNotice:
    """What the holder of an idle lease is told (in the renew answer)."""

    idle_since: float
    revocable_at: float

    def to_json(self) -> dict[str, Any]:
        return {"idle_since": self.idle_since, "revocable_at": self.revocable_at}


def gpu_is_idle(live: LiveState) -> bool:
    return live.utilization_percent == 0 and not live.processes


class IdleTracker:
    """Since when each active lease has been idle, from the samples it was shown."""

    def __init__(self, rules: IdleRules) -> None:
        self.rules = rules
        self._since: dict[str, float] = {}

    def observe(
        self, leases: Iterable[Lease], live_of: Callable[[str], LiveState], now: float
    ) -> None:
        """Take a sample taken at `now`: start or stop each lease's idle time."""
        since: dict[str, float] = {}
        for lease in leases:
            if lease.gpus and all(gpu_is_idle(live_of(u)) for u in lease.uuids):
                since[lease.id] = self._since.get(lease.id, now)
        self._since = since

    def idle_leases(self) -> dict[str, float]:
        """Each lease idle at the last sample, and since when."""
        return dict(self._since)

    def idle_since(self, lease_id: str) -> float | None:
        return self._since.get(lease_id)

    def notice(self, lease_id: str, now: float) -> IdleNotice | None:
        """The notice for a lease idle at least `reclaim_seconds`; None otherwise."""
        since = self._since.get(lease_id)
        reclaim = self.rules.reclaim_seconds
        if since is None or reclaim is None or now - since < reclaim:
            return None
        return IdleNotice(since, since + reclaim + self.rules.grace_seconds)

    def victim(self, leases: Iterable[Lease], wanted: frozenset[str], now: float) -> Lease | None:
        """The longest-idle lease past its grace that holds a GPU someone waits for."""
        due = [
            lease
            for lease in leases
            if wanted.intersection(lease.uuids)
            and (notice := self.notice(lease.id, now)) is not None
            and notice.revocable_at <= now
        ]
        return min(due, key=lambda lease: (self._since[lease.id], lease.id), default=None)
