"""What the rebuilt ledger's records say of the leases a recovery must judge.

Records are what the daemon itself wrote: the rows SQLite read of the damaged ledger (its
write-ahead log replayed), the backup under them, and the index of the units' table. Only
they say that a lease exists, whose it is and whether it was still held; a process may
then only show which of them it runs under (docs/recovery.md, "What is believed").

A lease to judge is active in the records and holds no active unit: its row survived
while its units' rows were lost, or its row was lost while its other rows (its `granted`
event, its request id, its energy) name it. For each, the records give its owner, whether
it was still held, the units any record names for it (the backup's rows, the index of
`lease_gpus`, the power caps' put-backs it wrote: a GPU's first capped lease since its limit
was last its own writes one, a next capped lease of it none) and the process a bound lease is
bound to.
"""

from __future__ import annotations

import enum
import sqlite3
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuallocd.host import users
from gpuallocd.ledger.salvage import SalvageReport
from gpuallocd.model.lease import ENDINGS as ENDINGS_OF_LEASES

__all__ = ["Held", "Recorded", "Records", "active_units", "read_records", "user_name"]

ENDINGS = tuple(sorted(ENDINGS_OF_LEASES))  # as an SQL list: ("expired", "freed", ...)
CHUNK = 500  # lease ids looked up per query (SQLite bounds the parameters of one)


class Held(str, enum.Enum):
    """Whether the records show a lease still held when the ledger was last written."""

    ACTIVE = "active"
    ENDED = "ended"
    UNKNOWN = "unknown"  # its own row and part of its history unreadable


@dataclass(frozen=True)
class Recorded:
    """One lease as the records know it."""

    id: str
    owner_uid: int | None
    owner: str  # the owner's name ("an unknown user" where no record names one)
    held: Held
    row: bool  # its own row survived
    created_at: float | None = None
    holder: tuple[int, int] | None = None  # a bound lease's process: pid and start time
    named: frozenset[str] = frozenset()  # every unit a record names for it
    released: bool = False  # its units' rows say they were given back


@dataclass
class Records:
    """The leases to judge, and any lease id a process carries, as the records know them."""

    to_judge: list[Recorded]
    known: dict[str, Recorded]  # by id: those to judge, and the ids processes carry
    active_units: dict[str, tuple[str, str]]  # unit UUID -> the active lease and its owner
    shared_gpus: frozenset[str]  # GPUs whose units may be memory shares

    def of(self, lease_id: str) -> Recorded | None:
        return self.known.get(lease_id)


def user_name(uid: int | None) -> str:
    """The user database's name for `uid` (its number where it has none)."""
    return "an unknown user" if uid is None else users.user_name(uid)


def active_units(conn: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    """Each unit in an active lease, with that lease's id and owner."""
    rows = conn.execute(
        "SELECT g.gpu_uuid, g.lease_id, l.owner_name FROM lease_gpus g "
        "JOIN leases l ON l.id = g.lease_id WHERE g.active = 1 AND l.state = 'active'"
    )
    return {str(unit): (str(lease), str(owner)) for unit, lease, owner in rows}


def _named_units(
    conn: sqlite3.Connection,
    salvage: SalvageReport,
    base_units: Mapping[str, Collection[str]],
) -> dict[str, set[str]]:
    named: dict[str, set[str]] = {k: set(v) for k, v in base_units.items()}
    for lease_id, unit in salvage.unit_keys:
        named.setdefault(lease_id, set()).add(unit)
    for lease_id, unit in conn.execute("SELECT lease_id, gpu_uuid FROM lease_gpus"):
        named.setdefault(str(lease_id), set()).add(str(unit))
    for lease_id, gpu in conn.execute("SELECT lease_id, gpu_uuid FROM power_caps"):
        named.setdefault(str(lease_id), set()).add(str(gpu))
    return named


def _with_rows(
    conn: sqlite3.Connection, named: Mapping[str, set[str]], where: str, params: Iterable[str]
) -> list[Recorded]:
    """Leases whose own row survived, as `where` selects them."""
    rows = conn.execute(
        "SELECT id, owner_uid, owner_name, state, created_at, bound, pid, pid_start_time, "
        "EXISTS (SELECT 1 FROM lease_gpus g WHERE g.lease_id = leases.id), "
        "EXISTS (SELECT 1 FROM lease_gpus g WHERE g.lease_id = leases.id AND g.active = 1) "
        f"FROM leases WHERE {where}",
        tuple(params),
    )
    found = []
    for lease_id, uid, name, state, created, bound, pid, start, has_units, holds in rows:
        found.append(
            Recorded(
                id=str(lease_id),
                owner_uid=int(uid),
                owner=str(name),
                held=Held.ACTIVE if state == "active" else Held.ENDED,
                row=True,
                created_at=float(created),
                holder=(int(pid), int(start)) if bound and pid and start is not None else None,
                named=frozenset(named.get(str(lease_id), ())),
                released=bool(has_units) and not holds,
            )
        )
    return found


def _row_lost(
    conn: sqlite3.Connection,
    named: Mapping[str, set[str]],
    history_whole: bool,
    carried: Collection[str],
) -> list[Recorded]:
    """Leases named by other rows (their history, request ids, energy) whose own row is gone:
    those not shown ended, and those processes carry (one query for the ended ones: a
    ledger whose leases' pages are gone names many)."""
    ids = [
        str(row[0])
        for row in conn.execute(
            "SELECT lease_id FROM history UNION SELECT lease_id FROM lease_requests "
            "UNION SELECT lease_id FROM energy_use WHERE lease_id IS NOT NULL "
            "EXCEPT SELECT id FROM leases"
        )
    ]
    ended = {
        str(row[0])
        for row in conn.execute(
            f"SELECT DISTINCT lease_id FROM history WHERE event IN {ENDINGS} "
            "AND lease_id NOT IN (SELECT id FROM leases)"
        )
    }
    wanted = [i for i in ids if i not in ended or i in carried]
    return [_from_other_rows(conn, lease_id, named, history_whole) for lease_id in wanted]


def _from_other_rows(
    conn: sqlite3.Connection, lease_id: str, named: Mapping[str, set[str]], history_whole: bool
) -> Recorded:
    granted = conn.execute(
        "SELECT actor_uid, at FROM history WHERE lease_id = ? AND event = 'granted' "
        "ORDER BY seq LIMIT 1",
        (lease_id,),
    ).fetchone()
    ended = conn.execute(
        f"SELECT 1 FROM history WHERE lease_id = ? AND event IN {ENDINGS} LIMIT 1", (lease_id,)
    ).fetchone()
    request = conn.execute(
        "SELECT owner_uid FROM lease_requests WHERE lease_id = ?", (lease_id,)
    ).fetchone()
    energy = conn.execute(
        "SELECT owner_uid, owner_name FROM energy_use WHERE lease_id = ? LIMIT 1", (lease_id,)
    ).fetchone()
    uid = next((int(r[0]) for r in (granted, request, energy) if r is not None), None)
    name = str(energy[1]) if energy is not None and int(energy[0]) == uid else user_name(uid)
    if ended is not None:
        held = Held.ENDED
    elif request is not None or (granted is not None and history_whole):
        held = Held.ACTIVE  # a request id is forgotten when its lease ends
    else:
        held = Held.UNKNOWN
    return Recorded(
        id=lease_id,
        owner_uid=uid,
        owner=name,
        held=held,
        row=False,
        created_at=float(granted[1]) if granted is not None else None,
        named=frozenset(named.get(lease_id, ())),
    )


def read_records(
    path: Path,
    salvage: SalvageReport,
    base_units: Mapping[str, Collection[str]],
    carried: Collection[str],
) -> Records:
    """The records of the ledger at `path` (rebuilt, not yet opened as a Ledger).

    `base_units`: the active units of the backup it was built on, by lease (read before the
    salvaged rows were laid over it). `carried`: the lease ids processes carry."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        named = _named_units(conn, salvage, base_units)
        judged = _with_rows(
            conn,
            named,
            "state = 'active' AND NOT EXISTS (SELECT 1 FROM lease_gpus g "
            "WHERE g.lease_id = leases.id AND g.active = 1)",
            (),
        )
        history_whole = salvage.unreadable is None and "history" not in salvage.damaged_tables
        lost_rows = _row_lost(conn, named, history_whole, carried)
        wanted = sorted(set(carried) - {r.id for r in judged + lost_rows})
        others = []
        for at in range(0, len(wanted), CHUNK):  # any number of carried ids, a bound per query
            chunk = wanted[at : at + CHUNK]
            others += _with_rows(conn, named, f"id IN ({', '.join('?' for _ in chunk)})", chunk)
        units = active_units(conn)
        shared = {
            str(r[0])
            for r in conn.execute("SELECT uuid FROM gpus WHERE share_capacity_bytes IS NOT NULL")
        }
    finally:
        conn.close()
    whole_units = salvage.unreadable is None and "lease_gpus" not in salvage.damaged_tables
    to_judge = [_released_if(r, whole_units) for r in judged] + lost_rows
    known = {r.id: r for r in [*to_judge, *others]}
    return Records(to_judge, known, units, frozenset(shared))


def _released_if(found: Recorded, whole_units: bool) -> Recorded:
    """A lease whose units' table was read whole and holds none of them had given them back
    (or been purged): it ended."""
    if found.released or not whole_units:
        return found
    return Recorded(
        found.id,
        found.owner_uid,
        found.owner,
        found.held,
        found.row,
        found.created_at,
        found.holder,
        found.named,
        released=True,
    )
