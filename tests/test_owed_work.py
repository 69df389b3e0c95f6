"""The owed-work runner in a real ledger on a hand clock: it sleeps until woken or until the
next try of work that failed, never polling; a round's outcome is one transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from gpuallocd.allocator.cleanups import CleanupRunner
from gpuallocd.ledger import Ledger
from gpuallocd.model.cleanup import Cleanup
from tests.harness import HandClock

OWED = Cleanup("power_limit", "GPU-0", {"restore_mw": 300_000}, "L1")


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    yield ledger
    ledger.close()


async def settle() -> None:
    """Let every task that can run, run (the runner is on this loop, as in the daemon)."""
    for _ in range(50):
        await asyncio.sleep(0)


def scenario(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


def test_with_nothing_owed_the_runner_sleeps_until_woken(ledger: Ledger) -> None:
    """One round at start, then none however long the clock runs, until an end wakes it:
    then one round, which does the work."""
    clock = HandClock(100.0)
    done: list[Cleanup] = []
    runner = CleanupRunner(ledger, {"power_limit": done.append}, clock=clock)

    async def test() -> None:
        task = asyncio.create_task(runner.run_forever())
        await settle()
        assert (runner.rounds, runner.due_at) == (1, None)
        for _ in range(10):
            clock.step(30.0)
            await settle()
        assert runner.rounds == 1  # no poll
        ledger.add_cleanups([OWED], now=clock())
        runner.wake()
        await settle()
        assert runner.rounds == 2 and done == [OWED] and ledger.pending_cleanups() == []
        task.cancel()

    scenario(test)


def test_work_due_later_or_failing_wakes_the_runner_only_when_due(ledger: Ledger) -> None:
    """An end owes work due 1 s later: the runner's next round is then, not before; a try
    that fails puts the next one off by its backoff, and the runner sleeps until it."""
    clock = HandClock(100.0)
    failures = [OSError("the driver refused"), OSError("the driver refused")]
    done: list[Cleanup] = []

    def handler(cleanup: Cleanup) -> None:
        if failures:
            raise failures.pop(0)
        done.append(cleanup)

    runner = CleanupRunner(ledger, {"power_limit": handler}, clock=clock)

    async def test() -> None:
        task = asyncio.create_task(runner.run_forever())
        await settle()
        ledger.add_cleanups([OWED], now=clock())  # owed from now, tried from now on
        runner.wake(clock() + 1.0)
        await settle()
        assert (runner.rounds, runner.due_at) == (1, 101.0)
        clock.step(1.0)
        runner.wake(clock())  # the sleep's own timer, on this hand clock
        await settle()
        (owed,) = ledger.pending_cleanups()
        assert (runner.rounds, owed.attempts, runner.due_at) == (2, 1, 102.0)
        clock.step(1.0)
        runner.wake(clock())
        await settle()
        assert (runner.rounds, runner.due_at) == (3, 104.0)  # 2 s after the second failure
        clock.step(1.0)
        await settle()
        assert runner.rounds == 3  # not due yet: no round
        clock.step(1.0)
        runner.wake(clock())
        await settle()
        assert runner.rounds == 4 and done == [OWED] and runner.due_at is None
        task.cancel()

    scenario(test)


def test_the_driver_answering_again_retries_failed_work_at_once(ledger: Ledger) -> None:
    """Work that failed waits its backoff, unless the driver answers again: then it is tried
    at once, whether due or not."""
    clock = HandClock(0.0)
    answers = [OSError("not answering")]
    done: list[Cleanup] = []

    def handler(cleanup: Cleanup) -> None:
        if answers:
            raise answers.pop(0)
        done.append(cleanup)

    runner = CleanupRunner(ledger, {"power_limit": handler}, clock=clock)
    ledger.add_cleanups([OWED], now=0.0)

    async def test() -> None:
        task = asyncio.create_task(runner.run_forever())
        await settle()
        assert runner.due_at == 1.0 and done == []
        runner.retry_now()
        await settle()
        assert done == [OWED] and ledger.pending_cleanups() == []
        task.cancel()

    scenario(test)
