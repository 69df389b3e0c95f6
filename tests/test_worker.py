"""The serial worker's group commit, on a real ledger: calls that arrive together commit
together on the commit thread, callers hear only after the commit, nothing runs meanwhile,
and a failed commit fails the whole batch."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.errors import LedgerError
from gpuallocd.ledger import Ledger
from tests.test_ledger import GPUS, make_lease


class GatedLedger:
    """A real ledger whose group commits wait at a gate, and can be told to fail there."""

    def __init__(self, path: Path) -> None:
        self.commits: list[float] = []
        self.ledger = Ledger(path, commit_timer=self.commits.append)
        self.ledger.sync_gpus(GPUS, 0.0)
        self.commits.clear()
        self.gate = threading.Event()
        self.gate.set()
        self.at_gate = threading.Event()
        self.fail_next = False
        self.threads: list[str] = []

    @contextmanager
    def unit_of_work(self) -> Iterator[None]:
        with self.ledger.unit_of_work():
            yield
            self.threads.append(threading.current_thread().name)
            self.at_gate.set()
            self.gate.wait(30)
            if self.fail_next:
                self.fail_next = False
                raise LedgerError("the disk refused the write")


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[GatedLedger]:
    gated = GatedLedger(tmp_path / "ledger.sqlite3")
    yield gated
    gated.ledger.close()


def grant(gated: GatedLedger, lease_id: str, index: int) -> str:
    gated.ledger.grant(make_lease(lease_id, [index]), actor_uid=1000)
    return lease_id


def committed(gated: GatedLedger) -> list[str]:
    """Active leases as another reader of the file sees them: only what was committed."""
    with closing(sqlite3.connect(gated.ledger.path)) as db, db:
        return sorted(r[0] for r in db.execute("SELECT id FROM leases WHERE state = 'active'"))


def active(gated: GatedLedger) -> list[str]:
    return sorted(lease.id for lease in gated.ledger.active_leases())


def test_calls_that_arrive_together_commit_once_off_the_event_loop(gated: GatedLedger) -> None:
    """Three concurrent grants: one commit, on the commit thread, all three durable."""

    async def scenario() -> list[str]:
        worker = SerialWorker(gated.unit_of_work)
        results = await asyncio.gather(*(worker.run(grant, gated, f"l{i}", i) for i in range(3)))
        await worker.close()
        return list(results)

    assert asyncio.run(scenario()) == ["l0", "l1", "l2"]
    assert len(gated.commits) == 1
    assert gated.threads[0].startswith("ledger-commit")
    assert active(gated) == ["l0", "l1", "l2"]


def test_callers_hear_only_after_the_commit_and_nothing_runs_during_it(
    gated: GatedLedger,
) -> None:
    """While a batch commits, its callers wait and a call that arrives meanwhile waits too."""
    published: list[int] = []

    async def scenario() -> None:
        worker = SerialWorker(gated.unit_of_work, after_commit=lambda: published.append(1))
        gated.gate.clear()
        batch = asyncio.gather(*(worker.run(grant, gated, f"b{i}", i) for i in range(2)))
        await asyncio.get_running_loop().run_in_executor(None, gated.at_gate.wait, 30)
        later = asyncio.ensure_future(worker.run(grant, gated, "later", 5))
        for _ in range(20):  # many turns of the loop: neither may move while the disk syncs
            await asyncio.sleep(0)
        assert not batch.done() and not later.done()
        assert published == [] and committed(gated) == []
        gated.gate.set()
        assert await batch == ["b0", "b1"]
        assert await later == "later"
        await worker.close()

    asyncio.run(scenario())
    assert published == [1, 1]  # after the batch's commit, then after the lone call's
    assert active(gated) == ["b0", "b1", "later"]


def test_a_failed_commit_fails_every_call_of_its_batch_and_the_next_call_works(
    gated: GatedLedger,
) -> None:
    """The batch's callers get LedgerError, the view is reloaded, the worker goes on."""
    reloads: list[int] = []

    async def scenario() -> list[object]:
        worker = SerialWorker(gated.unit_of_work, on_commit_failure=lambda: reloads.append(1))
        gated.fail_next = True
        failed = await asyncio.gather(
            *(worker.run(grant, gated, f"f{i}", i) for i in range(2)), return_exceptions=True
        )
        after = await worker.run(grant, gated, "after", 3)
        await worker.close()
        return [*failed, after]

    first, second, after = asyncio.run(scenario())
    assert isinstance(first, LedgerError) and isinstance(second, LedgerError)
    assert after == "after"
    assert reloads == [1]
    assert active(gated) == ["after"]  # the failed batch left nothing behind


def test_a_failing_publisher_neither_loses_the_answer_nor_stops_the_worker(
    gated: GatedLedger, caplog: pytest.LogCaptureFixture
) -> None:
    """after_commit raising (say an observer's disk is full) is logged; calls go on."""

    def broken_publisher() -> None:
        raise OSError("no space left on device")

    async def scenario() -> list[str]:
        worker = SerialWorker(gated.unit_of_work, after_commit=broken_publisher)
        gated.gate.clear()
        batch = asyncio.gather(*(worker.run(grant, gated, f"p{i}", i) for i in range(2)))
        await asyncio.get_running_loop().run_in_executor(None, gated.at_gate.wait, 30)
        later = asyncio.ensure_future(worker.run(grant, gated, "alone", 4))  # queued meanwhile
        gated.gate.set()
        done = [*await batch, await asyncio.wait_for(later, 30)]  # a wedged worker fails here
        await worker.close()
        return done

    assert asyncio.run(scenario()) == ["p0", "p1", "alone"]
    assert active(gated) == ["alone", "p0", "p1"]
    assert "publishing a commit's transitions failed" in caplog.text
