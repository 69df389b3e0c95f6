"""Pending cleanups in a real ledger: written in the transaction that ends the lease (or not
at all), done by kind, retried with backoff on the ledger's clock, never dropped."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuallocd.allocator.cleanups import CleanupRunner, retry_delay
from gpuallocd.errors import LedgerError
from gpuallocd.ledger import Ledger
from gpuallocd.model import Gpu, Lease, LeasedGpu, LeaseState
from gpuallocd.model.cleanup import Cleanup
from tests.harness import HandClock

UUID = "GPU-0"


def lease(lease_id: str = "L1", owner: int = 1000) -> Lease:
    gpu = LeasedGpu(uuid=UUID, index=0)
    return Lease(lease_id, (gpu,), owner, "alice", None, None, "simple", 1.0, 100.0)


def owes(ended: Lease) -> list[Cleanup]:
    return [Cleanup("device_acl", "/dev/nvidia0", {"uid": ended.owner_uid}, ended.id)]


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    found = Ledger(tmp_path / "ledger.sqlite3")
    found.sync_gpus([Gpu(index=0, uuid=UUID, name="A100")], now=0.0)
    found.cleanup_plans = (owes,)
    yield found
    found.close()


def test_the_end_of_a_lease_writes_what_it_owes_in_the_same_transaction(ledger: Ledger) -> None:
    """A lease's end records its cleanups; an end the ledger refuses records none."""
    granted = lease()
    ledger.grant(granted, 1000)
    ledger.end([granted.ended(LeaseState.FREED, 5.0)], 1000)
    (owed,) = ledger.pending_cleanups()
    assert owed.cleanup == owes(granted)[0] and owed.created_at == 5.0 and owed.attempts == 0

    def broken(ended: Lease) -> list[Cleanup]:
        return [Cleanup("device_acl", None, {}, ended.id)]  # type: ignore[arg-type]

    ledger.cleanup_plans = (broken,)  # its row breaks NOT NULL: the whole end is rolled back
    other = lease("L2")
    ledger.grant(other, 1000)
    with pytest.raises(LedgerError):
        ledger.end([other.ended(LeaseState.FREED, 6.0)], 1000)
    assert [lease.id for lease in ledger.active_leases()] == ["L2"]
    assert len(ledger.pending_cleanups()) == 1


def test_the_same_work_is_owed_once(ledger: Ledger) -> None:
    """Alice frees GPU 0 a hundred times while its cleanup fails: one row, not a hundred."""
    for n in range(100):
        again = lease(f"L{n}")
        ledger.grant(again, 1000)
        ledger.end([again.ended(LeaseState.FREED, 5.0 + n)], 1000)
    ledger.add_cleanups(owes(lease("L0")), now=500.0)
    assert [p.cleanup.target for p in ledger.pending_cleanups()] == ["/dev/nvidia0"]
    ledger.add_cleanups(owes(lease("L0", owner=1001)), now=500.0)  # bob's entry is other work
    assert len(ledger.pending_cleanups()) == 2


def test_a_failing_cleanup_is_retried_with_backoff_until_done(ledger: Ledger) -> None:
    """Fails twice (next tries 1 s then 2 s later, none before), then done and deleted."""
    clock = HandClock(10.0)
    outcomes = [OSError(95, "Operation not supported"), OSError(95, "Operation not supported")]
    done: list[Cleanup] = []

    def handler(cleanup: Cleanup) -> None:
        if outcomes:
            raise outcomes.pop(0)
        done.append(cleanup)

    ledger.add_cleanups(owes(lease()), now=10.0)
    runner = CleanupRunner(ledger, {"device_acl": handler}, clock=clock)
    assert asyncio.run(runner.run_due()) == 0
    (owed,) = ledger.pending_cleanups()
    assert (owed.attempts, owed.next_try) == (1, 11.0)
    assert "Operation not supported" in (owed.last_error or "")
    clock.step(0.5)
    assert (
        asyncio.run(runner.run_due()) == 0 and ledger.pending_cleanups()[0].attempts == 1
    )  # not due
    clock.step(0.5)
    assert asyncio.run(runner.run_due()) == 0 and ledger.pending_cleanups()[0].next_try == 13.0
    clock.step(2.0)
    assert asyncio.run(runner.run_due()) == 1
    assert ledger.pending_cleanups() == [] and len(done) == 1


def test_the_delay_doubles_from_a_second_to_a_minute() -> None:
    """1, 2, 4 ... seconds after each failure, never more than 60."""
    assert [retry_delay(n) for n in (1, 2, 3, 7, 8, 50)] == [1.0, 2.0, 4.0, 60.0, 60.0, 60.0]


def test_unknown_kinds_wait_a_minute(ledger: Ledger) -> None:
    """A row of a kind this version cannot do stays, tried again a minute later."""
    clock = HandClock(0.0)
    ledger.add_cleanups([Cleanup("power_limit", UUID, {"watts": 300})], now=0.0)
    runner = CleanupRunner(ledger, {}, clock=clock)
    assert asyncio.run(runner.run_due()) == 0
    (owed,) = runner.report()
    assert owed["kind"] == "power_limit" and owed["next_try"] == 60.0
    assert "no handler for 'power_limit'" in owed["last_error"]


def test_a_closed_ledger_is_a_ledger_error(ledger: Ledger) -> None:
    """The runner's failures to write come back as LedgerError (the loop logs them)."""
    ledger.add_cleanups(owes(lease()), now=0.0)
    ledger.close()
    with pytest.raises(LedgerError):
        asyncio.run(CleanupRunner(ledger, {}, clock=HandClock(0.0)).run_due())
