"""Grant and end on the sqlite3 connection: committed before they return, one transaction
each, savepoints inside a group commit."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from gpuallocd.errors import GpuBusy
from gpuallocd.ledger import Ledger
from gpuallocd.model import LeaseState
from tests.test_ledger import GPUS, make_lease


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ledger.sync_gpus(GPUS, 0.0)
    yield ledger
    ledger.close()


def seen_by_another_connection(ledger: Ledger) -> tuple[list[str], list[tuple[str, str]]]:
    """Active lease ids and (lease, event) history, as a second reader of the file sees them."""
    with closing(sqlite3.connect(ledger.path)) as conn, conn:
        active = [r[0] for r in conn.execute("SELECT id FROM leases WHERE state = 'active'")]
        events = list(conn.execute("SELECT lease_id, event FROM history ORDER BY seq"))
    return active, events


def test_a_grant_and_its_end_are_committed_when_they_return(ledger: Ledger) -> None:
    """Another connection sees the lease, its GPUs' release and both events at once."""
    lease = make_lease("a", [0, 1])
    ledger.grant(lease, 7)
    assert seen_by_another_connection(ledger) == (["a"], [("a", "granted")])
    ledger.end([lease.ended(LeaseState.FREED, 2.0)], 7)
    assert seen_by_another_connection(ledger) == ([], [("a", "granted"), ("a", "freed")])
    ledger.grant(make_lease("b", [0, 1]), 7)  # the GPUs were released


def test_a_unit_of_work_commits_its_grants_together(ledger: Ledger) -> None:
    """Inside a unit of work nothing is visible to others; at its end, every grant is."""
    with ledger.unit_of_work():
        ledger.grant(make_lease("a", [0]), 0)
        ledger.grant(make_lease("b", [1]), 0)
        assert seen_by_another_connection(ledger) == ([], [])
    assert seen_by_another_connection(ledger)[0] == ["a", "b"]


def test_a_refused_grant_in_a_unit_of_work_leaves_the_others(ledger: Ledger) -> None:
    """A double booking rolls back its own savepoint only; the batch commits the rest."""
    with ledger.unit_of_work():
        ledger.grant(make_lease("a", [0]), 0)
        with pytest.raises(GpuBusy):
            ledger.grant(make_lease("b", [1, 0]), 0)
        ledger.grant(make_lease("c", [1]), 0)
    active, events = seen_by_another_connection(ledger)
    assert active == ["a", "c"] and [e[0] for e in events] == ["a", "c"]


def test_a_refused_grant_leaves_no_transaction_open(ledger: Ledger) -> None:
    """After a refusal the ledger takes reads and writes as before, and others can write."""
    ledger.grant(make_lease("a", [0]), 0)
    with pytest.raises(GpuBusy):
        ledger.grant(make_lease("b", [0]), 0)
    assert [lease.id for lease in ledger.active_leases()] == ["a"]
    with closing(sqlite3.connect(ledger.path, timeout=0)) as other, other:  # the write lock is free
        other.execute("UPDATE gpus SET name = 'x' WHERE uuid = 'GPU-5'")
    ledger.grant(make_lease("c", [1]), 0)


def _page_size(path: Path) -> int:
    with closing(sqlite3.connect(path)) as db, db:
        return int(db.execute("PRAGMA page_size").fetchone()[0])


def test_a_new_ledger_uses_small_pages_so_a_commit_syncs_less(tmp_path: Path) -> None:
    """A new ledger is made with 1 KiB pages: a grant syncs a quarter of the bytes."""
    path = tmp_path / "ledger.sqlite3"
    Ledger(path).close()
    assert _page_size(path) == 1024


def test_a_ledger_made_with_larger_pages_keeps_them_and_its_leases(tmp_path: Path) -> None:
    """An existing ledger with 4 KiB pages opens as it is: its leases stay, its pages too."""
    path = tmp_path / "ledger.sqlite3"
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("PRAGMA page_size=4096")
        db.execute("VACUUM")
    ledger = Ledger(path)
    ledger.sync_gpus(GPUS, 0.0)
    ledger.grant(make_lease("old", [0]), actor_uid=1000)
    ledger.close()
    reopened = Ledger(path)
    assert [lease.id for lease in reopened.active_leases()] == ["old"]
    reopened.close()
    assert _page_size(path) == 4096
