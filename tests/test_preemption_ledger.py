"""The ledger keeps what preemption needs: a preemptible lease's terms from its grant, each
preemption's deadline and state for a restart, and preemptible GPU-hours apart in usage."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from gpuallocd.ledger import Ledger, LedgerReader
from gpuallocd.model import (
    LeaseState,
    Preemption,
    PreemptionState,
    PreemptTerms,
    PreemptTrigger,
)
from tests.test_ledger import GPUS, SCHEMA_V1, make_lease

TERMS = PreemptTerms(1800.0, 60.0, 300.0, "SIGUSR1", queued_since=0.5)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ledger.sync_gpus(GPUS, 0.0)
    yield ledger
    ledger.close()


def _preemption(lease_id: str, state: PreemptionState = PreemptionState.WARNED) -> Preemption:
    return Preemption(
        lease_id=lease_id,
        owner_uid=1000,
        owner_name="ana",
        trigger=PreemptTrigger.REQUEST,
        for_user="bob",
        for_uid=1001,
        explanation="preempting lease a of ana for bob's request",
        decided_at=10.0,
        signal_at=70.0,
        deadline_at=370.0,
        state=state,
    )


def test_a_preemptible_lease_keeps_its_terms_across_a_reopen(tmp_path: Path) -> None:
    """The terms are written with the grant and read back with the lease, active or ended."""
    ledger = Ledger(tmp_path / "l.sqlite3")
    ledger.sync_gpus(GPUS, 0.0)
    lease = replace(make_lease("a", [0]), preemptible=TERMS)
    ledger.grant(lease, 1000)
    ledger.grant(make_lease("b", [1]), 1000)
    ledger.close()
    again = Ledger(tmp_path / "l.sqlite3")
    found = {x.id: x for x in again.active_leases()}
    assert found["a"].preemptible == TERMS
    assert found["b"].preemptible is None
    again.end([found["a"].ended(LeaseState.PREEMPTED, 20.0)], 0, "checkpoint acknowledged")
    ended = again.lease("a")
    assert ended is not None and ended.state is LeaseState.PREEMPTED
    assert ended.preemptible == TERMS
    again.close()


def test_a_lease_granted_before_preemption_existed_is_not_preemptible(tmp_path: Path) -> None:
    """An older ledger upgraded: its leases are as they were, none preemptible."""
    with closing(sqlite3.connect(tmp_path / "v1.db")) as conn, conn:
        conn.executescript(SCHEMA_V1)
    ledger = Ledger(tmp_path / "v1.db")
    (lease,) = ledger.active_leases()
    assert lease.preemptible is None
    assert ledger.open_preemptions() == []
    ledger.close()


def test_a_preemption_is_resumed_only_while_its_lease_is_active(ledger: Ledger) -> None:
    """`open_preemptions` gives the warned and signalled preemptions of active leases, with
    their deadline as recorded; one whose lease ended meanwhile is not resumed."""
    for lease_id, gpu in (("a", 0), ("b", 1), ("c", 2)):
        ledger.grant(replace(make_lease(lease_id, [gpu]), preemptible=TERMS), 1000)
        ledger.add_preemption(_preemption(lease_id))
    signalled = replace(_preemption("b"), state=PreemptionState.SIGNALLED, signalled_at=70.5)
    ledger.save_preemption(signalled)
    (c,) = [x for x in ledger.active_leases() if x.id == "c"]
    ledger.end([c.ended(LeaseState.FREED, 30.0)], 1000)
    assert [p.lease_id for p in ledger.open_preemptions()] == ["a", "b"]
    assert ledger.preemption("b") == signalled
    assert ledger.open_preemptions()[0].deadline_at == 370.0


def test_a_checkpoint_path_is_recorded_as_text(ledger: Ledger) -> None:
    """The last acknowledged checkpoint of a lease: its time and the path as given."""
    ledger.grant(replace(make_lease("a", [0]), preemptible=TERMS), 1000)
    odd = "/tmp/../etc/shadow; rm -rf /"
    ledger.record_checkpoint("a", 42.0, odd)
    assert ledger.last_checkpoints(["a", "nope"]) == {"a": (42.0, odd)}


def test_purge_takes_a_preempted_lease_with_its_terms_and_preemption(ledger: Ledger) -> None:
    """Past retention, a preempted lease goes with its terms and its preemption (no row left
    to a foreign key)."""
    lease = replace(make_lease("a", [0]), preemptible=TERMS)
    ledger.grant(lease, 1000)
    ledger.add_preemption(_preemption("a", PreemptionState.ACKNOWLEDGED))
    ledger.end([lease.ended(LeaseState.PREEMPTED, 50.0)], 0)
    assert ledger.purge_before(100.0, 10) == 1
    assert ledger.preemption("a") is None
    assert ledger.preempt_terms(["a"]) == {}


def test_usage_counts_preemptible_gpu_hours_apart(ledger: Ledger) -> None:
    """Usage charges a preemptible lease like any, and gives its GPU-hours apart."""
    held = replace(make_lease("a", [0, 1], at=0.0), preemptible=TERMS)
    other = make_lease("b", [2], at=0.0)
    ledger.grant(held, 1000)
    ledger.grant(other, 1000)
    ledger.end([held.ended(LeaseState.PREEMPTED, 3600.0), other.ended(LeaseState.FREED, 3600.0)], 0)
    reader = LedgerReader(ledger.path)
    try:
        (usage,) = reader.usage(0.0, 7200.0)
    finally:
        reader.close()
    assert usage.gpu_hours == pytest.approx(3.0)
    assert usage.preemptible_gpu_hours == pytest.approx(2.0)
