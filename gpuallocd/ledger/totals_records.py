"""The running totals on the ledger (totals.py): a user's totals at a time, use per user over
a window and per day, their rebuild and purge, and the check that they agree with the leases.

`Ledger` (the writer) and `LedgerReader` (the long reads) both have these; the writer reads
on its own connection inside the worker, the reader in one snapshot of its own.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import cast

from sqlalchemy import Connection

from gpuallocd.ledger.access import LedgerAccess
from gpuallocd.ledger.totals import (
    Change,
    MarkSteps,
    Step,
    Totals,
    TotalsReader,
    latest_mark_at,
    purge_totals_before,
    rebuild_totals,
    scan_totals,
    whole_minute,
)
from gpuallocd.model import UserUsage

__all__ = ["TotalsRecords", "user_usage"]

NOTHING = 1e-6  # GPU-seconds, joules: less than this is no use (rounding of fractions)


def driver(conn: Connection) -> sqlite3.Connection:
    """The sqlite3 connection under one of SQLAlchemy's."""
    return cast(sqlite3.Connection, conn.connection.driver_connection)


def _used(totals: Totals) -> bool:
    return (
        totals.leases != 0
        or abs(totals.gpu_seconds) > NOTHING
        or abs(totals.joules) > NOTHING
        or abs(totals.unleased_joules) > NOTHING
        or abs(totals.unleased_seconds) > NOTHING
    )


def user_usage(uid: int, used: Totals) -> UserUsage:
    """What `usage` shows of one user's totals over a window."""
    return UserUsage(
        uid,
        used.name or str(uid),
        max(0.0, used.gpu_seconds) / 3600.0,
        used.leases,
        used.waited_seconds,
        energy_joules=used.joules,
        energy_estimate=used.estimates > 0,
        unleased_gpu_hours=used.unleased_seconds / 3600.0,
        unleased_energy_joules=used.unleased_joules,
    )


class TotalsRecords(LedgerAccess):
    """Reads and upkeep of `use_marks`."""

    _totals: TotalsReader | None = None  # the writer's, kept while no purge changes it
    _marks: MarkSteps | None = None

    def _total_steps(self, changes: Iterable[Change]) -> list[Step]:
        if self._marks is None:
            self._marks = MarkSteps()
        return self._marks.steps(self._latest_mark_at, changes)

    def _latest_mark_at(self, uid: int) -> float:
        with self._read() as conn:
            return latest_mark_at(driver(conn), uid)

    def totals_at(self, uid: int, when: float) -> Totals:
        """`uid`'s running totals at `when` (two index seeks, whatever the history)."""
        with self._read() as conn:
            if self._totals is None:
                self._totals = TotalsReader(driver(conn))
            return self._totals.at(uid, when)

    def usage(self, since: float, until: float) -> list[UserUsage]:
        """Each user's GPU-hours, leases, waiting and energy inside [since, until], from two
        points of their running totals; most GPU-hours first."""
        with self._snapshot() as totals:
            found = []
            for uid in totals.owners():
                used = totals.at(uid, until).since(totals.at(uid, since))
                if _used(used):
                    found.append(user_usage(uid, used))
        return sorted(found, key=lambda u: (-u.gpu_hours, u.user))

    def totals_between(self, bounds: Sequence[float]) -> list[dict[int, Totals]]:
        """Each user's use (by uid, with their name) between each two consecutive `bounds`:
        one point of their totals per bound, whatever they did in between."""
        pieces: list[dict[int, Totals]] = [{} for _ in bounds[1:]]
        with self._snapshot() as totals:
            for uid in totals.owners():
                points = [totals.at(uid, bound) for bound in bounds]
                name = next((p.name for p in reversed(points) if p.name), str(uid))
                for piece, (start, end) in enumerate(itertools.pairwise(points)):
                    used = end.since(start)
                    if _used(used):
                        pieces[piece][uid] = replace(used, name=name)
        return pieces

    def daily_totals(self, bounds: Sequence[float]) -> list[dict[str, Totals]]:
        """Each user's use (by name) in each day between consecutive `bounds`."""
        return [
            {used.name or str(uid): used for uid, used in day.items()}
            for day in self.totals_between(bounds)
        ]

    def rebuild_totals(self) -> int:
        """Rebuild every user's running totals from the leases and energy readings (one
        transaction); how many marks. Recovery calls this once the rows are laid down."""
        with self._write() as conn:
            written = rebuild_totals(driver(conn))
        self._totals = self._marks = None
        return written

    def purge_totals_before(self, cutoff: float, batch: int) -> int:
        """Delete up to `batch` marks older than `cutoff` (each user's last one before it
        stays); how many went."""
        with self._write() as conn:
            done = purge_totals_before(driver(conn), cutoff, batch)
        self._totals = self._marks = None
        return done

    def totals_disagree(self, since: float, until: float) -> list[str]:
        """Where the running totals over [since, until] (each taken down to its whole minute,
        where the totals are exact) differ from the leases and energy readings added up
        anew; empty when they agree."""
        since, until = (whole_minute(since), whole_minute(until))
        with self._snapshot() as totals:
            scanned = scan_totals(totals.connection, since, until)
            found = []
            for uid in sorted(set(totals.owners()) | set(scanned)):
                kept = totals.at(uid, until).since(totals.at(uid, since))
                found += _differences(uid, kept, scanned.get(uid, Totals()))
        return found

    @contextmanager
    def _snapshot(self) -> Iterator[TotalsReader]:
        """A reader of the marks; on a read-only connection, in one snapshot."""
        with self._read() as conn:
            db = driver(conn)
            if db.in_transaction:  # the writer inside a unit of work: its own view
                yield TotalsReader(db)
                return
            db.execute("BEGIN")
            try:
                yield TotalsReader(db)
            finally:
                db.execute("ROLLBACK")


def _differences(uid: int, kept: Totals, scanned: Totals) -> list[str]:
    pairs = {
        "GPU-seconds": (kept.gpu_seconds, scanned.gpu_seconds),
        "leases": (kept.leases, scanned.leases),
        "waited seconds": (kept.waited_seconds, scanned.waited_seconds),
        "joules": (kept.joules, scanned.joules),
        "unleased joules": (kept.unleased_joules, scanned.unleased_joules),
        "unleased GPU-seconds": (kept.unleased_seconds, scanned.unleased_seconds),
    }
    return [
        f"uid {uid}: {what} {a:.6g} in the running totals, {b:.6g} in the history"
        for what, (a, b) in pairs.items()
        if abs(a - b) > max(1e-6, 1e-9 * abs(b))
    ]
