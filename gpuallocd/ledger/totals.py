"""Each user's running totals, kept with every grant, end and energy reading (`use_marks`).

A user's use up to a time t is a handful of running totals: GPU-seconds held under leases,
leases granted and the time they waited, energy drawn under leases (and how many of those
readings were estimates), and energy and GPU time used without a lease. Use over any window
[a, b] is the totals at b less the totals at a, so budgets, `usage` and the dashboard read
two points per user, never the leases in between.

The totals are kept as marks: one row per user per minute in which one of them changed,
holding the totals just after the last change in that minute (`at`) and the GPUs the user
held from then on. Between two changes GPU-seconds grow at that rate, so the totals at any
time (of what happened before it) are the last mark before it, carried forward
(`TotalsReader.at`); a window [a, b) counts the leases granted and the readings taken from a
up to, not including, b. Each change is
one statement in the transaction of the grant, end or reading that made it (`MarkSteps`),
two where it is dated before a later mark.

Exact at every minute; within the minute of a window's start, changes made in that minute
before the start count as after it: the error is at most a minute of each GPU granted or
ended in that minute (documented in docs/accounting.md). A change dated before a later mark
(an expiry recorded when it was due, after the owner's next reading; the wall clock stepped
back) also moves the later marks, at most one per minute since its time, never one per
lease. A lease ended "before" its grant (the clock stepped back while it ran) counts nothing.

The marks can always be rebuilt from the leases and energy readings (`rebuild_totals`: by
the migration that adds them and by recovery), and `scan_totals` adds up the same figures
from the leases, for the check that both agree.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

from gpuallocd.model.energy import EnergyUse
from gpuallocd.model.lease import Lease, lease_gpu_weight

__all__ = [
    "MARK_SECONDS",
    "Change",
    "MarkSteps",
    "Totals",
    "TotalsReader",
    "ended",
    "energy_changes",
    "granted",
    "latest_mark_at",
    "purge_totals_before",
    "rebuild_totals",
    "scan_totals",
    "whole_minute",
]

MARK_SECONDS = 60  # one mark per user per minute at most
Step = tuple[str, Sequence[Any]]

_COUNTED = (
    "leases",
    "waited_seconds",
    "joules",
    "estimates",
    "unleased_joules",
    "unleased_seconds",
)
# ?1 uid, ?2 minute, ?3 time, ?4 name, ?5 GPUs held from then on (+/-), ?6... what it adds
_ADD_LATER = ", ".join(f"{name} = {name} + ?{n}" for n, name in enumerate(_COUNTED, start=6))
_FROM_PREVIOUS = ", ".join(f"coalesce(p.{name}, 0) + ?{n}" for n, name in enumerate(_COUNTED, 6))
_TAKE = ", ".join(
    f"{name} = excluded.{name}" for name in ("at", "owner_name", "gpus", "gpu_seconds", *_COUNTED)
)
_MOVE_LATER = (
    f"UPDATE use_marks SET gpu_seconds = gpu_seconds + ?5 * (at - ?3), gpus = gpus + ?5, "
    f"{_ADD_LATER} WHERE owner_uid = ?1 AND minute >= ?2 AND at > ?3"
)
_MARK = (
    "INSERT INTO use_marks (owner_uid, minute, at, owner_name, gpus, gpu_seconds, "
    f"{', '.join(_COUNTED)}) "
    "SELECT ?1, ?2, ?3, ?4, coalesce(p.gpus, 0) + ?5, "
    f"coalesce(p.gpu_seconds + p.gpus * (?3 - p.at), 0), {_FROM_PREVIOUS} "
    "FROM (SELECT 1) LEFT JOIN (SELECT * FROM use_marks WHERE owner_uid = ?1 AND minute <= ?2 "
    "AND at <= ?3 ORDER BY minute DESC LIMIT 1) AS p WHERE 1 "
    f"ON CONFLICT (owner_uid, minute) DO UPDATE SET {_TAKE} WHERE use_marks.at <= excluded.at"
)
_COLUMNS = f"at, gpus, gpu_seconds, {', '.join(_COUNTED)}, owner_name"
_BEFORE = (
    f"SELECT {_COLUMNS} FROM use_marks WHERE owner_uid = ? AND minute <= ? AND at < ? "
    "ORDER BY minute DESC LIMIT 1"
)
# Every user with a mark, one index seek each (a loose scan of the key's first column).
_OWNERS = (
    "WITH RECURSIVE owners(uid) AS (SELECT min(owner_uid) FROM use_marks UNION ALL "
    "SELECT (SELECT min(owner_uid) FROM use_marks WHERE owner_uid > owners.uid) FROM owners "
    "WHERE owners.uid IS NOT NULL) SELECT uid FROM owners WHERE uid IS NOT NULL"
)
_PURGED = "SELECT value FROM meta WHERE key = 'totals_purged_before'"


FARTHEST = 1e15  # seconds from 1970 a time is taken down to (years: 30 million)


def _minute(at: float) -> int:
    """The minute of `at` (a time asked for past any mark's is taken at the farthest one a
    SQLite integer holds with room to spare)."""
    if not -FARTHEST < at < FARTHEST:
        at = FARTHEST if at > 0 else -FARTHEST
    return int(at // MARK_SECONDS)


def whole_minute(at: float) -> float:
    """`at` taken down to its whole minute, where the totals are exact."""
    return float(_minute(at) * MARK_SECONDS)


@dataclass(frozen=True, slots=True)
class Change:
    """One change of a user's totals at `at`: GPUs held from then on (+/-) and what it adds."""

    owner_uid: int
    owner_name: str
    at: float
    gpus: float = 0.0
    leases: int = 0
    waited_seconds: float = 0.0
    joules: float = 0.0
    estimates: int = 0
    unleased_joules: float = 0.0
    unleased_seconds: float = 0.0

    def steps(self, *, move_later: bool = True) -> list[Step]:
        """The statements that apply this change: later marks first (where there may be
        any), then its own."""
        values = (
            self.owner_uid,
            _minute(self.at),
            self.at,
            self.owner_name,
            self.gpus,
            self.leases,
            self.waited_seconds,
            self.joules,
            self.estimates,
            self.unleased_joules,
            self.unleased_seconds,
        )
        return [(_MOVE_LATER, values), (_MARK, values)] if move_later else [(_MARK, values)]


def granted(lease: Lease) -> Change:
    """A grant: the lease's GPUs held from its start, one lease, the time it waited."""
    return Change(
        lease.owner_uid,
        lease.owner_name,
        lease.created_at,
        gpus=lease_gpu_weight(lease),
        leases=1,
        waited_seconds=lease.waited_seconds,
    )


def ended(lease: Lease, at: float) -> Change:
    """An end at `at` (never before the lease's start: then it held nothing)."""
    return Change(
        lease.owner_uid, lease.owner_name, max(at, lease.created_at), gpus=-lease_gpu_weight(lease)
    )


def energy_changes(uses: Iterable[EnergyUse]) -> list[Change]:
    """One change per user and minute of the readings, dated at the minute's last: the joules
    drawn under leases and without (a mark holds a minute's totals after its last change, so
    the readings of one minute added as one change leave the marks as one by one would)."""
    found: dict[tuple[int, int], Change] = {}
    for use in uses:
        key = (use.owner_uid, _minute(use.at))
        was = found.get(key) or Change(use.owner_uid, use.owner_name, use.at)
        leased = use.lease_id is not None
        found[key] = Change(
            was.owner_uid,
            use.owner_name if use.at >= was.at else was.owner_name,  # the latest reading's
            max(was.at, use.at),
            joules=was.joules + (use.joules if leased else 0.0),
            estimates=was.estimates + int(leased and use.estimate),
            unleased_joules=was.unleased_joules + (0.0 if leased else use.joules),
            unleased_seconds=was.unleased_seconds + (0.0 if leased else use.gpu_seconds),
        )
    return list(found.values())


_LATEST = "SELECT at FROM use_marks WHERE owner_uid = ? ORDER BY minute DESC LIMIT 1"


def latest_mark_at(connection: sqlite3.Connection, uid: int) -> float:
    """When `uid`'s latest mark was made (-inf: none)."""
    row = connection.execute(_LATEST, (uid,)).fetchone()
    return float("-inf") if row is None else float(row[0])


class MarkSteps:
    """The statements of changes, without the move of later marks where their owner has no
    mark after the change (nearly always: changes come in time order). Each owner's latest
    mark time is read once (`latest_of`), then kept as an upper bound: a write rolled back
    leaves it higher than the ledger's, which costs only a move that finds nothing."""

    def __init__(self) -> None:
        self._latest: dict[int, float] = {}

    def steps(self, latest_of: Callable[[int], float], changes: Iterable[Change]) -> list[Step]:
        found: list[Step] = []
        for change in changes:
            uid = change.owner_uid
            latest = self._latest.get(uid)
            if latest is None:
                latest = latest_of(uid)
            found += change.steps(move_later=change.at < latest)
            self._latest[uid] = max(latest, change.at)
        return found

    def forget(self) -> None:
        """After the marks were rebuilt or purged: read each owner's latest again."""
        self._latest.clear()


@dataclass(frozen=True, slots=True)
class Totals:
    """A user's running totals at one time (`name`: the user's name at the mark read)."""

    gpu_seconds: float = 0.0
    leases: int = 0
    waited_seconds: float = 0.0
    joules: float = 0.0
    estimates: int = 0
    unleased_joules: float = 0.0
    unleased_seconds: float = 0.0
    name: str | None = None

    def since(self, earlier: Totals) -> Totals:
        """What was added between `earlier` and these totals."""
        added = {
            f.name: getattr(self, f.name) - getattr(earlier, f.name)
            for f in fields(self)
            if f.name != "name"
        }
        return Totals(**added, name=self.name or earlier.name)

    @property
    def all_joules(self) -> float:
        """Energy under leases and without (what kWh budgets count)."""
        return self.joules + self.unleased_joules


class TotalsReader:
    """Reads of the marks on one sqlite3 connection (the writer's, or a read-only one);
    `purged_before` is read once: make a new reader after a purge."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        row = connection.execute(_PURGED).fetchone()
        self.purged_before = float(row[0]) if row is not None else float("-inf")

    def at(self, uid: int, when: float) -> Totals:
        """`uid`'s totals at `when` (of what happened before it): the last mark before it,
        carried forward. Before the marks were purged, the totals at the purge (what is kept
        counts from there)."""
        when = max(when, self.purged_before)
        row = self.connection.execute(_BEFORE, (uid, _minute(when), when)).fetchone()
        if row is None:
            return Totals()
        at, gpus, gpu_seconds, leases, waited, joules, estimates, unleased, seconds, name = row
        return Totals(
            gpu_seconds + gpus * (when - at),
            leases,
            waited,
            joules,
            estimates,
            unleased,
            seconds,
            name,
        )

    def owners(self) -> list[int]:
        """Every user the marks know."""
        return [uid for (uid,) in self.connection.execute(_OWNERS)]


# Rebuilding --------------------------------------------------------------------------------

_LEASE_EVENTS = """
SELECT owner_uid, owner_name, created_at AS at,
  (SELECT total(fraction) FROM lease_gpus WHERE lease_id = leases.id) AS gpus,
  1 AS leases, waited_seconds, 0.0, 0, 0.0, 0.0
FROM leases
UNION ALL
SELECT owner_uid, owner_name, max(ended_at, created_at),
  -(SELECT total(fraction) FROM lease_gpus WHERE lease_id = leases.id), 0, 0.0, 0.0, 0, 0.0, 0.0
FROM leases WHERE ended_at IS NOT NULL
"""
_ENERGY_EVENTS = """
UNION ALL
SELECT owner_uid, owner_name, at, 0.0, 0, 0.0,
  CASE WHEN lease_id IS NOT NULL THEN joules ELSE 0.0 END,
  CASE WHEN lease_id IS NOT NULL AND estimate THEN 1 ELSE 0 END,
  CASE WHEN lease_id IS NULL THEN joules ELSE 0.0 END,
  CASE WHEN lease_id IS NULL THEN gpu_seconds ELSE 0.0 END
FROM energy_use
"""
_HAS_ENERGY = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'energy_use'"
_INSERT = (
    "INSERT INTO use_marks (owner_uid, minute, at, owner_name, gpus, gpu_seconds, "
    f"{', '.join(_COUNTED)}) VALUES ({', '.join('?' * (6 + len(_COUNTED)))})"
)
_BATCH = 10_000


def _marks(events: Iterable[Sequence[Any]]) -> Iterator[tuple[Any, ...]]:
    """The marks of events ordered by user and time: one per user per minute."""
    mark: list[Any] | None = None
    for uid, name, at, gpus, *counted in events:
        if mark is not None and (mark[0] != uid or mark[1] != _minute(at)):
            yield tuple(mark)
            if mark[0] != uid:
                mark = None
        if mark is None:
            mark = [uid, _minute(at), at, name, 0.0, 0.0, *([0] * len(_COUNTED))]
        held = mark[5] + mark[4] * (at - mark[2])
        mark[1:6] = [_minute(at), at, name, mark[4] + gpus, held]
        mark[6:] = [total + added for total, added in zip(mark[6:], counted, strict=True)]
    if mark is not None:
        yield tuple(mark)


def rebuild_totals(connection: sqlite3.Connection) -> int:
    """Replace every mark with those the leases and energy readings give (inside the caller's
    transaction; a ledger older than energy readings has none); how many marks."""
    connection.execute("DELETE FROM use_marks")
    connection.execute("DELETE FROM meta WHERE key = 'totals_purged_before'")
    written = 0
    batch: list[tuple[Any, ...]] = []
    energy = _ENERGY_EVENTS if connection.execute(_HAS_ENERGY).fetchone() else ""
    for mark in _marks(connection.execute(f"{_LEASE_EVENTS}{energy} ORDER BY 1, 3")):
        batch.append(mark)
        if len(batch) >= _BATCH:
            connection.executemany(_INSERT, batch)
            written, batch = written + len(batch), []
    connection.executemany(_INSERT, batch)
    return written + len(batch)


_OLD_MARKS = (
    "DELETE FROM use_marks WHERE owner_uid = ?1 AND minute IN (SELECT minute FROM use_marks "
    "WHERE owner_uid = ?1 AND minute < (SELECT max(minute) FROM use_marks WHERE owner_uid = ?1 "
    "AND minute < ?2) ORDER BY minute LIMIT ?3)"
)
_SET_PURGED = (
    "INSERT INTO meta (key, value) VALUES ('totals_purged_before', ?) "
    "ON CONFLICT (key) DO UPDATE SET value = max(CAST(value AS REAL), excluded.value)"
)


def purge_totals_before(connection: sqlite3.Connection, cutoff: float, batch: int) -> int:
    """Delete up to `batch` marks older than `cutoff`, keeping each user's last one before it
    (the totals from which the kept marks go on); how many went."""
    connection.execute(_SET_PURGED, (cutoff,))
    done = 0
    for (uid,) in connection.execute(_OWNERS).fetchall():
        done += connection.execute(_OLD_MARKS, (uid, _minute(cutoff), batch - done)).rowcount
        if done >= batch:
            break
    return done


# The same figures from the history itself (the check that the marks agree) ----------------

_SCAN_HELD = """
SELECT owner_uid, total(gpus * max(min(coalesce(max(ended_at, created_at), ?2), ?2)
                                     - max(created_at, ?1), 0))
FROM (SELECT *, (SELECT total(fraction) FROM lease_gpus WHERE lease_id = leases.id) AS gpus
      FROM leases)
GROUP BY owner_uid
"""
_SCAN_GRANTED = """
SELECT owner_uid, count(*), total(waited_seconds) FROM leases
WHERE created_at >= ?1 AND created_at < ?2 GROUP BY owner_uid
"""
_SCAN_ENERGY = """
SELECT owner_uid,
  total(CASE WHEN lease_id IS NOT NULL THEN joules END),
  total(CASE WHEN lease_id IS NOT NULL AND estimate THEN 1 END),
  total(CASE WHEN lease_id IS NULL THEN joules END),
  total(CASE WHEN lease_id IS NULL THEN gpu_seconds END)
FROM energy_use WHERE at >= ?1 AND at < ?2 GROUP BY owner_uid
"""


def scan_totals(connection: sqlite3.Connection, since: float, until: float) -> dict[int, Totals]:
    """Each user's use over [since, until) added up from every lease and reading (slow: for
    the check, never for a grant)."""
    found: dict[int, dict[str, float]] = {}
    window = (since, until)
    for uid, held in connection.execute(_SCAN_HELD, window):
        found.setdefault(uid, {})["gpu_seconds"] = held
    for uid, count, waited in connection.execute(_SCAN_GRANTED, window):
        found.setdefault(uid, {}).update(leases=count, waited_seconds=waited)
    for uid, joules, estimates, unleased, seconds in connection.execute(_SCAN_ENERGY, window):
        found.setdefault(uid, {}).update(
            joules=joules,
            estimates=int(estimates),
            unleased_joules=unleased,
            unleased_seconds=seconds,
        )
    return {uid: Totals(**values) for uid, values in found.items()}  # type: ignore[arg-type]
