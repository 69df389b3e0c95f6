"""When each active lease expires, on a clock that no one can set.

The wall clock can jump (an admin, NTP stepping after a suspend, a wrong RTC at boot): a
step forward would expire every lease, a step back would keep them for hours. So expiry runs
on CLOCK_BOOTTIME, which only moves forward and keeps counting through a suspend (a lease's
TTL is time that passes, suspended or not). The wall-clock times of a lease (`created_at`,
`expires_at`) are kept for people and for the ledger.

Across a restart: CLOCK_BOOTTIME starts again at each boot and the ledger keeps wall times,
so a lease read from the ledger gets the deadline `now + (expires_at - wall now)`: the time
it had left by the wall clock when the daemon started. A wall-clock step while the daemon is
down therefore shortens or lengthens what is left of the leases of that moment (never beyond
`max_ttl_seconds`); after start, steps change nothing, and each renewal counts from then on
the monotonic clock.

An expiry is recorded at the time it was due (`due_at`), however late the daemon notices it
(it was down, or nothing asked): the lease is charged its TTL, not the time until then.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from gpuallocd.model import Lease

__all__ = ["Deadlines", "boottime"]

Clock = Callable[[], float]


def boottime() -> float:
    """Seconds since boot, suspend included; the monotonic clock where there is none."""
    clock_id = getattr(time, "CLOCK_BOOTTIME", None)
    if clock_id is None:  # pragma: no cover - not Linux
        return time.monotonic()
    return time.clock_gettime(clock_id)


class Deadlines:
    """The monotonic deadline of each active lease."""

    def __init__(self, wall: Clock, monotonic: Clock, max_seconds: float) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self._max_seconds = max_seconds
        self._at: dict[str, float] = {}

    def adopt(self, lease: Lease) -> None:
        """A lease read from the ledger: what it has left by the wall clock, from now on."""
        left = min(lease.expires_at - self._wall(), self._max_seconds)
        self._at[lease.id] = self._monotonic() + left

    def start(self, lease_id: str, ttl_seconds: float) -> None:
        """A lease granted or renewed now for `ttl_seconds`."""
        self._at[lease_id] = self._monotonic() + ttl_seconds

    def due_at(self, lease: Lease) -> float:
        """The wall-clock time at which `lease` was due, however late this is asked: an
        expiry is recorded (and charged) at that time, not when it was noticed. Never before
        the lease began, never after now."""
        now_wall, now = self._wall(), self._monotonic()
        if lease.id not in self._at:
            self.adopt(lease)
        due = now_wall - max(0.0, now - self._at[lease.id])
        return max(lease.created_at, min(due, now_wall))

    def passed(self, lease: Lease) -> bool:
        return bool(self.due((lease,)))

    def due(self, leases: Iterable[Lease]) -> list[Lease]:
        """The leases whose deadline has passed, all against one reading of the clock."""
        now = self._monotonic()
        at = self._at
        due = []
        for lease in leases:
            if lease.id not in at:
                self.adopt(lease)
            if at[lease.id] <= now:
                due.append(lease)
        return due

    def left(self, lease_id: str) -> float | None:
        """Seconds until `lease_id`'s deadline (below 0 once passed); None if not known."""
        at = self._at.get(lease_id)
        return None if at is None else at - self._monotonic()

    @property
    def monotonic(self) -> Clock:
        return self._monotonic

    def forget(self, lease_id: str) -> None:
        self._at.pop(lease_id, None)

    def clear(self) -> None:
        self._at.clear()
