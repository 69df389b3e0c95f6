"""A lease's coming end, warned at its owner's thresholds: one timer for every reason.

Each reason a lease may end (its TTL, idle reclaim, an advance reservation; preemption is one
more) gives a deadline; `arm` sets it with the thresholds to warn at, and the timer answers
with the warnings that are due. The work is that of the leases whose next threshold is due:
a heap ordered by when each threshold falls, never a scan of the active leases. A deadline
armed again (a renewal) or taken back (the lease ended, the lease is busy again) leaves its
old entries in the heap, dropped when they come up (each carries its generation); once such
stale entries are half the heap, it is rebuilt without them. So the heap holds about the
entries of the armed deadlines, whatever the history: a lease freed at once after its grant
leaves nothing behind for the rest of its TTL (at 500 grants a second, that was a million
entries an hour, and every push paid for them).

A threshold fires only when the time left falls to it from above: a lease granted (or renewed)
for 10 minutes is never warned "15 minutes before"; the time left when the deadline was set is
its `span`. A threshold that passed while nobody was watching (the daemon was down) fires once,
late, when the deadline is armed again: the tightest one of those only. The ledger's unique key
of each warning (model/notice.py) makes it once across restarts.

Times are on the monotonic clock that decides expiry (leases/deadlines.py): a wall-clock step
neither fires a warning early nor holds one back.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuallocd.model.notice import EndingReason

__all__ = ["Deadline", "EndingAhead", "Warning"]

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a lease ends for one reason: `left` seconds from now (monotonic), `wall` the same
    by the wall clock (shown to people), `epoch` what names this deadline across a restart
    (the expiry time, a reservation's id; "" for once per lease), `why` a few words."""

    left: float
    wall: float
    epoch: str
    why: str = ""


@dataclass(frozen=True, slots=True)
class Warning:
    """A threshold that is due: tell the owner of `lease_id` that it ends for `reason`."""

    lease_id: str
    reason: EndingReason
    threshold: float
    deadline: Deadline


@dataclass(order=True)
class _Entry:
    at: float  # monotonic time the threshold falls
    generation: int
    lease_id: str = field(compare=False)
    reason: EndingReason = field(compare=False)
    threshold: float = field(compare=False)


@dataclass(frozen=True, slots=True)
class _Armed:
    generation: int
    deadline: Deadline
    ends_at: float  # monotonic


MIN_COMPACTED = 64  # a heap this small is never rebuilt


class EndingAhead:
    """The armed deadlines of active leases and the heap of their thresholds."""

    def __init__(self, monotonic: Clock) -> None:
        self._monotonic = monotonic
        self._heap: list[_Entry] = []
        self._armed: dict[tuple[str, EndingReason], _Armed] = {}
        self._generations = itertools.count(1)
        self._queued: dict[int, int] = {}  # entries in the heap, by generation
        self._stale = 0  # entries in the heap whose generation is no longer armed

    def heap_size(self) -> int:
        """Entries in the heap, stale ones included (for tests of its bound)."""
        return len(self._heap)

    def __len__(self) -> int:
        return len(self._armed)

    def arm(
        self,
        lease_id: str,
        reason: EndingReason,
        deadline: Deadline,
        thresholds: Sequence[float],
        *,
        span: float | None = None,
    ) -> None:
        """Warn at `thresholds` before `deadline` (replacing what was armed for this lease and
        reason). `span`: the time left when the deadline was set (default: now)."""
        now = self._monotonic()
        span = deadline.left if span is None else span
        generation = next(self._generations)
        self._retire(self._armed.get((lease_id, reason)))
        self._armed[(lease_id, reason)] = _Armed(generation, deadline, now + deadline.left)
        live = [t for t in thresholds if t < span]
        passed = [t for t in live if t >= deadline.left]
        if passed:  # missed while nobody watched: the tightest one, now
            self._push(_Entry(now, generation, lease_id, reason, min(passed)))
        for threshold in live:
            if threshold < deadline.left:
                at = now + deadline.left - threshold
                self._push(_Entry(at, generation, lease_id, reason, threshold))
        self._compact()

    def armed(self, lease_id: str, reason: EndingReason) -> Deadline | None:
        found = self._armed.get((lease_id, reason))
        return None if found is None else found.deadline

    def disarm(self, lease_id: str, reason: EndingReason | None = None) -> None:
        """Warn no more of `lease_id`'s end for `reason` (every reason when None)."""
        reasons = list(EndingReason) if reason is None else [reason]
        for each in reasons:
            self._retire(self._armed.pop((lease_id, each), None))
        self._compact()

    def due(self) -> list[Warning]:
        """The warnings whose time has come, each with its deadline as it stands now; of
        several thresholds of one deadline due at once, the tightest alone."""
        now = self._monotonic()
        due: dict[tuple[str, EndingReason], Warning] = {}
        while self._heap and self._heap[0].at <= now:
            entry = heapq.heappop(self._heap)
            self._popped(entry.generation)
            key = (entry.lease_id, entry.reason)
            armed = self._armed.get(key)
            if armed is None or armed.generation != entry.generation:
                continue  # armed again since, or taken back
            if key in due and due[key].threshold <= entry.threshold:
                continue
            was = armed.deadline
            deadline = Deadline(armed.ends_at - now, was.wall, was.epoch, was.why)
            due[key] = Warning(entry.lease_id, entry.reason, entry.threshold, deadline)
        return list(due.values())

    # The heap's bound -----------------------------------------------------------------------

    def _push(self, entry: _Entry) -> None:
        heapq.heappush(self._heap, entry)
        self._queued[entry.generation] = self._queued.get(entry.generation, 0) + 1

    def _popped(self, generation: int) -> None:
        left = self._queued.pop(generation, 0) - 1
        if left > 0:
            self._queued[generation] = left
        elif left < 0:  # a stale entry (its count was moved to `_stale`)
            self._stale -= 1

    def _retire(self, armed: _Armed | None) -> None:
        """`armed` is replaced or taken back: its entries still in the heap are stale."""
        if armed is not None:
            self._stale += self._queued.pop(armed.generation, 0)

    def _compact(self) -> None:
        """Rebuild the heap without its stale entries once they are half of it."""
        if len(self._heap) < MIN_COMPACTED or 2 * self._stale < len(self._heap):
            return
        live = {armed.generation for armed in self._armed.values()}
        self._heap = [entry for entry in self._heap if entry.generation in live]
        heapq.heapify(self._heap)
        self._stale = 0
