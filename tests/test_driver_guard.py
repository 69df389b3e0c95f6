"""The driver guard on its own: one call at a time off the loop, later ones skipped while it
hangs (no thread piles up), the hung call named, its late answer dropped."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gpuallocd.daemon.driver_guard import DriverGuard
from gpuallocd.errors import InventoryError
from gpuallocd.inventory.calls import CallWatch
from tests.harness import HandClock


def driver_threads() -> int:
    return sum(t.name.startswith("gpuallocd-driver-") for t in threading.enumerate())


async def until(check: object) -> None:
    for _ in range(3000):
        if callable(check) and check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


def test_a_hung_call_holds_one_thread_and_later_calls_are_skipped() -> None:
    """While the first call blocks, every later one is skipped at once and a rescan is
    refused naming the hung call; when it returns, its answer is dropped and calls run again."""
    clock = HandClock(0.0)
    gate = CallWatch(clock)
    guard = DriverGuard(gate, deadline_seconds=0.01)
    release = threading.Event()
    ran: list[str] = []

    def hung() -> str:
        with gate.track("nvmlDeviceGetMemoryInfo"):
            ran.append("hung")
            release.wait(60)
        return "stale"

    async def scenario() -> None:
        assert await guard.run("sample", hung) is None  # past the deadline, still running
        clock.step(30.0)
        for _ in range(20):
            assert await guard.run("sample", lambda: ran.append("later")) is None
        assert ran == ["hung"] and driver_threads() == 1
        report = guard.report()
        assert report["state"] == "hung" and report["paused"] == ["sample"]
        assert [(c["call"], c["seconds"]) for c in report["hung_calls"]] == [
            ("nvmlDeviceGetMemoryInfo", 30.0)
        ]
        with pytest.raises(InventoryError, match=r"nvmlDeviceGetMemoryInfo running for 30\.0 s"):
            await guard.answer("rescan", lambda: "never")
        release.set()
        await until(lambda: not guard.busy)
        assert await guard.run("sample", lambda: "fresh") == "fresh"
        assert guard.report()["state"] == "ok" and guard.report()["hung_calls"] == []

    asyncio.run(scenario())
    for thread in threading.enumerate():
        if thread.name.startswith("gpuallocd-driver-"):
            thread.join(30)  # each ends once its call has returned
    assert driver_threads() == 0


def test_a_rescan_that_meets_a_running_sample_waits_for_it() -> None:
    """A rescan asked while a sample runs (not overdue) runs after it, not refused."""
    guard = DriverGuard(CallWatch(HandClock(0.0)), deadline_seconds=30.0)
    started, release = threading.Event(), threading.Event()

    def sample() -> str:
        started.set()
        release.wait(60)
        return "sampled"

    async def scenario() -> None:
        sampling = asyncio.create_task(guard.run("sample", sample))
        await until(started.is_set)
        rescan = asyncio.create_task(guard.answer("rescan", lambda: "rescanned"))
        await asyncio.sleep(0)  # the rescan finds the sample running
        assert guard.busy and not rescan.done()
        release.set()
        assert await rescan == "rescanned"
        assert await sampling == "sampled"

    asyncio.run(scenario())


def test_an_error_of_the_call_reaches_the_caller() -> None:
    """A call that fails in time raises its own error on the loop."""
    guard = DriverGuard(None, deadline_seconds=30.0)

    def failing() -> None:
        raise InventoryError("amdsmi said no")

    async def scenario() -> None:
        with pytest.raises(InventoryError, match="amdsmi said no"):
            await guard.run("sample", failing)

    asyncio.run(scenario())


def test_a_wait_that_asks_for_time_is_not_hung_within_it() -> None:
    """nvmlEventSetWait asks for its timeout: hung only past that plus the deadline."""
    clock = HandClock(0.0)
    gate = CallWatch(clock)
    with gate.track("nvmlEventSetWait", allowance_seconds=0.25):
        clock.step(0.3)
        assert gate.overdue(0.1) == []
        clock.step(0.1)
        assert [c.call for c in gate.overdue(0.1)] == ["nvmlEventSetWait"]
    assert gate.in_flight() == []
