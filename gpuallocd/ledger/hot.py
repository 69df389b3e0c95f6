"""The hot statements of grant and end, on the DBAPI connection SQLAlchemy manages.

Every allocate and free runs these, so they skip SQLAlchemy's Python layer (compiling,
result processing, transaction bookkeeping: most of a request's CPU time) and go straight to
the sqlite3 connection of the ledger's one SQLAlchemy connection. The SQL text is fixed, so
sqlite3's statement cache prepares each statement once. Nothing else changes: a change is
still one `BEGIN IMMEDIATE` transaction that commits before the caller is answered (the
connection's `synchronous` pragma decides the fsync), or a savepoint inside the unit of work
of a group commit; the partial unique index still refuses a double booking.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuallocd.model.lease import ENDING_EVENT, Lease, LeaseEvent

__all__ = ["HotWriter", "Step", "end_steps", "end_time", "grant_steps"]

Step = tuple[str, Sequence[Any]]  # one fixed statement and its parameters
_REPEATABLE = re.compile(r"\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)

_INSERT_LEASE = (
    "INSERT INTO leases (id, owner_uid, owner_name, pid, label, policy, created_at, "
    "expires_at, state, ended_at, bound, pid_start_time, waited_seconds, on_revoke, "
    "follow_work) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_LEASE_GPU = (
    "INSERT INTO lease_gpus (lease_id, gpu_uuid, gpu_index, position, active, kind, gpu_of, "
    "memory_bytes, profile, fraction, cap_mw) VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)"
)
_INSERT_EVENT = (
    "INSERT INTO history (lease_id, event, actor_uid, at, detail) VALUES (?, ?, ?, ?, ?)"
)
_INSERT_REQUEST = "INSERT INTO lease_requests (lease_id, owner_uid, request_id) VALUES (?, ?, ?)"
_FORGET_REQUEST = "DELETE FROM lease_requests WHERE lease_id = ?"
_END_LEASE = "UPDATE leases SET state = ?, ended_at = ? WHERE id = ?"
_RELEASE_GPUS = "UPDATE lease_gpus SET active = 0 WHERE lease_id = ?"
_GRANTED = LeaseEvent.GRANTED.value


def grant_steps(
    lease: Lease,
    actor_uid: int,
    request_id: str | None = None,
    caps: Mapping[str, int] | None = None,
) -> list[Step]:
    """The lease, its GPUs (each with its power cap in mW, if `caps` has one), its `granted`
    event, and the client's request id if given."""
    steps: list[Step] = [
        (
            _INSERT_LEASE,
            (
                lease.id,
                lease.owner_uid,
                lease.owner_name,
                lease.pid,
                lease.label,
                lease.policy,
                lease.created_at,
                lease.expires_at,
                lease.state.value,
                lease.ended_at,
                int(lease.bound),
                lease.pid_start_time,
                lease.waited_seconds,
                lease.on_revoke,
                int(lease.follow_work),
            ),
        )
    ]
    for position, gpu in enumerate(lease.gpus):
        unit = (
            gpu.kind.value,
            gpu.gpu_uuid,
            gpu.memory_bytes,
            gpu.profile,
            gpu.fraction,
            caps.get(gpu.uuid) if caps else None,
        )
        steps.append((_INSERT_LEASE_GPU, (lease.id, gpu.uuid, gpu.index, position, *unit)))
    steps.append((_INSERT_EVENT, (lease.id, _GRANTED, actor_uid, lease.created_at, None)))
    if request_id is not None:
        steps.append((_INSERT_REQUEST, (lease.id, lease.owner_uid, request_id)))
    return steps


def end_steps(leases: Sequence[Lease], actor_uid: int, detail: str | None) -> list[Step]:
    """Each ended lease's new state, its GPUs released, and its ending event."""
    steps: list[Step] = []
    for lease in leases:
        at = end_time(lease)
        event = ENDING_EVENT[lease.state].value
        steps.append((_END_LEASE, (lease.state.value, lease.ended_at, lease.id)))
        steps.append((_RELEASE_GPUS, (lease.id,)))
        steps.append((_FORGET_REQUEST, (lease.id,)))
        steps.append((_INSERT_EVENT, (lease.id, event, actor_uid, at, detail)))
    return steps


def end_time(lease: Lease) -> float:
    """When an ended lease ended (its expiry where no end was given)."""
    return lease.ended_at if lease.ended_at is not None else lease.expires_at


class HotWriter:
    """Runs steps in one transaction of their own, or as one savepoint of an open one."""

    def __init__(
        self,
        dbapi_connection: sqlite3.Connection,
        commit_timer: Callable[[float], None] = lambda seconds: None,
    ) -> None:
        """`commit_timer` is told how long each COMMIT of a transaction of its own took."""
        self._db = dbapi_connection
        self._cursor = dbapi_connection.cursor()
        self._commit_timer = commit_timer

    def close(self) -> None:
        self._cursor.close()

    def write(self, steps: Sequence[Step], *, nested: bool) -> None:
        """All of `steps` or none; sqlite3 errors propagate after the rollback."""
        cursor = self._cursor
        cursor.execute("SAVEPOINT hot_write" if nested else "BEGIN IMMEDIATE")
        try:
            for sql, runs in _runs(steps):  # a statement repeated in a row: one executemany
                if len(runs) == 1:
                    cursor.execute(sql, runs[0])
                else:
                    cursor.executemany(sql, runs)
        except BaseException:
            self._undo(nested)
            raise
        try:
            if nested:  # the unit of work commits, and is timed, as a whole
                cursor.execute("RELEASE hot_write")
            else:
                committing = time.perf_counter()
                cursor.execute("COMMIT")
                self._commit_timer(time.perf_counter() - committing)
        except BaseException:
            self._undo(nested)
            raise

    def _undo(self, nested: bool) -> None:
        if nested:
            self._cursor.execute("ROLLBACK TO hot_write")
            self._cursor.execute("RELEASE hot_write")
        elif self._db.in_transaction:
            self._cursor.execute("ROLLBACK")


def _runs(steps: Sequence[Step]) -> list[tuple[str, list[Sequence[Any]]]]:
    """`steps` in order, each run of one statement in a row as one statement and its
    parameters (executed as many times, in the same order, as one by one). Only writes
    that return no rows are run together: `executemany` takes nothing else."""
    found: list[tuple[str, list[Sequence[Any]]]] = []
    for sql, parameters in steps:
        if found and found[-1][0] == sql and _REPEATABLE.match(sql) and "RETURNING" not in sql:
            found[-1][1].append(parameters)
        else:
            found.append((sql, [parameters]))
    return found
