"""The board of advance reservations: which GPUs a request may not take because they are
promised to someone else for a window of time (docs/scheduling.md).

A reservation holds its GPUs from a lease of a non-member that would overlap its window:
from its start to its end nobody else gets them; before its start a lease may take them
only if its TTL ends by the start (backfill). The board keeps the reservations that have not
ended in memory, read from the ledger at start, so a restarted daemon (kill -9 too) holds
exactly what it promised. It records each reservation's start and end, at the time they
happened, once the daemon's clock has passed them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from gpuallocd.errors import CapacityError, ReservationConflict, UnknownReservation
from gpuallocd.host import users
from gpuallocd.ledger import Ledger
from gpuallocd.model import AdvanceReservation, Caller, Lease, ReservationEvent
from gpuallocd.model.durations import typed_duration
from gpuallocd.policies import Choice

__all__ = ["MIN_BACKFILL_SECONDS", "ReservationBoard", "caller_of_uid"]

# A defaulted TTL is never cut below this: the shortest TTL `gpuallocctl --ttl` takes (a
# lease this short expires before it is used); a reservation sooner than that refuses.
MIN_BACKFILL_SECONDS = 10.0

# The policy's checked choice with these GPUs (held by reservations) busy too.
Choose = Callable[[frozenset[str]], tuple[str, Choice]]


def caller_of_uid(uid: int) -> Caller:
    """The user `uid` as the user database has it now (for membership), pid 0."""
    entry = users.account(uid)
    if entry is None:
        return Caller(uid=uid, gid=-1, pid=0, user=str(uid))
    return Caller(uid, entry.gid, 0, entry.name, users.groups_of(entry.name, entry.gid))


class ReservationBoard:
    """The reservations that have not ended, and what they hold from whom."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._open: dict[str, AdvanceReservation] = {}
        self._started: set[str] = set()
        self.reload()

    def reload(self) -> None:
        """Read the reservations that have not ended from the ledger."""
        self._open, self._started = {}, set()
        for reservation, started in self._ledger.unfinished_reservations():
            self._open[reservation.id] = reservation
            if started:
                self._started.add(reservation.id)

    def live(self, now: float) -> list[AdvanceReservation]:
        """Reservations still to come or running, by start."""
        found = [r for r in self._open.values() if r.live(now)]
        return sorted(found, key=lambda r: (r.start_at, r.id))

    def get(self, reservation_id: str) -> AdvanceReservation:
        found = self._open.get(reservation_id)
        if found is None:
            raise UnknownReservation(
                f"no reservation {reservation_id!r} that has not ended",
                reservation=reservation_id,
            )
        return found

    # What a request may not take ------------------------------------------------------------

    def blocking(self, caller: Caller, now: float, ttl: float) -> list[AdvanceReservation]:
        """The reservations whose GPUs a lease of `caller` from now for `ttl` may not take."""
        return [r for r in self.live(now) if r.holds_from(caller, now, ttl)]

    def held(self, caller: Caller, now: float, ttl: float) -> frozenset[str]:
        if not self._open:
            return frozenset()
        return frozenset(u for r in self.blocking(caller, now, ttl) for u in r.gpus)

    def held_for_uid(self, uid: int | None, now: float, ttl: float) -> frozenset[str]:
        """`held` for the user `uid` (membership from the user database); none for None."""
        if uid is None or not self._open:
            return frozenset()
        return self.held(caller_of_uid(uid), now, ttl)

    def backfill_ttls(self, caller: Caller, now: float, ttl: float) -> list[float]:
        """The TTLs below `ttl` a defaulted one may be cut to, longest first: each ends when
        a blocking reservation starts (tried in turn, the choice avoids every reservation
        that starts earlier, so a lease ends at its own GPUs' reservation, not another's);
        none shorter than MIN_BACKFILL_SECONDS."""
        starts = {r.start_at - now for r in self.blocking(caller, now, ttl) if r.start_at > now}
        return sorted((s for s in starts if s >= MIN_BACKFILL_SECONDS), reverse=True)

    def conflict(
        self, caller: Caller, now: float, ttl: float, gpus: Iterable[str] = ()
    ) -> ReservationConflict:
        """The error for a request that only reservations keep from fitting."""
        wanted = frozenset(gpus)
        blocking = self.blocking(caller, now, ttl)
        first = next((r for r in blocking if wanted & set(r.gpus)), blocking[0])
        if first.start_at <= now:
            message = (
                f"reservation {first.id} holds its GPUs for {first.holder} until "
                f"{_clock_text(first.end_at)} ({first.reason})"
            )
            room = None
            quoted = [{"by": first.by_user, "by_uid": first.by_uid, "text": first.reason}]
        else:
            quoted = []
            room = first.start_at - now
            message = (
                f"reservation {first.id} for {first.holder} starts at "
                f"{_clock_text(first.start_at)}: a lease of {typed_duration(ttl)} would "
                f"overlap it; ask for a TTL of at most {typed_duration(room)} (--ttl), or wait"
            )
        return ReservationConflict(
            message,
            reservation=first.id,
            gpus=list(first.gpus),
            starts_at=first.start_at,
            ends_at=first.end_at,
            max_ttl_seconds=room,
            **({"quoted": quoted} if quoted else {}),
        )

    def check_renewal(self, caller: Caller, lease: Lease, now: float, ttl: float) -> None:
        """`reservation_conflict` for a renewal that would keep a reservation's GPUs past its
        start from someone outside it (membership is the lease owner's)."""
        owner = caller if caller.uid == lease.owner_uid else caller_of_uid(lease.owner_uid)
        gpus = {unit.gpu_uuid for unit in lease.gpus}
        if self.held(owner, now, ttl) & gpus:
            raise self.conflict(owner, now, ttl, gpus)

    def fit(
        self,
        caller: Caller,
        now: float,
        ttl: float,
        *,
        defaulted: bool,
        choose: Choose,
        wanted: Iterable[str] = (),
    ) -> tuple[float, tuple[str, Choice]]:
        """The TTL and choice of a grant from now for `ttl` that no reservation forbids.

        A TTL the request did not give (`defaulted`) is shortened to end before the next
        reservation starts where that lets the request fit (a backfill), as a default above
        a user's `max_ttl_seconds` is. A TTL the caller gave is never changed: the request is
        refused with `reservation_conflict`, which says the longest TTL that would fit
        (naming the reservation of a `wanted` GPU first).
        """
        held = self.held(caller, now, ttl)
        try:
            return ttl, choose(held)
        except CapacityError as exc:
            if not held:
                raise
            refused = exc
        for shorter in self.backfill_ttls(caller, now, ttl) if defaulted else ():
            with contextlib.suppress(CapacityError):
                return shorter, choose(self.held(caller, now, shorter))
        try:
            choose(frozenset())
        except CapacityError:
            raise refused from None  # it would not fit without the reservations either
        raise self.conflict(caller, now, ttl, wanted)

    def held_until(self, now: float, ttl: float) -> dict[str, float]:
        """For the queue's estimates: GPUs that a lease from now for `ttl` of someone outside
        the reservation could not take, and until when."""
        held: dict[str, float] = {}
        for r in self.live(now):
            if r.overlaps(now, now + ttl):
                for uuid in r.gpus:
                    held[uuid] = max(held.get(uuid, 0.0), r.end_at)
        return held

    def holding_now(self, now: float) -> dict[str, AdvanceReservation]:
        """The GPUs of running reservations, by UUID."""
        return {u: r for r in self.live(now) if r.start_at <= now for u in r.gpus}

    # Changes ----------------------------------------------------------------------------------

    def add(self, reservation: AdvanceReservation) -> None:
        self._ledger.add_reservation(reservation)
        self._open[reservation.id] = reservation

    def cancel(self, reservation_id: str, actor_uid: int, now: float) -> AdvanceReservation:
        reservation = self.get(reservation_id)
        self._ledger.cancel_reservation(reservation_id, actor_uid, now)
        del self._open[reservation_id]
        self._started.discard(reservation_id)
        return replace(reservation, cancelled_at=now)

    def due(self, now: float) -> bool:
        """Whether a start or an end has passed that `tick` has not recorded yet."""
        return any(
            now >= r.end_at or (now >= r.start_at and r.id not in self._started)
            for r in self._open.values()
        )

    def tick(self, now: float) -> list[tuple[AdvanceReservation, ReservationEvent]]:
        """Record the starts and ends the clock has passed, at the time they happened."""
        changes: list[tuple[AdvanceReservation, ReservationEvent]] = []
        for r in sorted(self._open.values(), key=lambda r: r.start_at):
            if now >= r.start_at and r.id not in self._started:
                self._ledger.note_reservation(r.id, ReservationEvent.STARTED, r.start_at, None)
                self._started.add(r.id)
                changes.append((r, ReservationEvent.STARTED))
            if now >= r.end_at:
                self._ledger.note_reservation(r.id, ReservationEvent.ENDED, r.end_at, None)
                del self._open[r.id]
                self._started.discard(r.id)
                changes.append((r, ReservationEvent.ENDED))
        return changes


def _clock_text(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
