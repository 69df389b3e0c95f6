"""The daemon runs on uvloop where it is installed, and on asyncio's loop otherwise; its
commit thread gets the interpreter lock within the daemon's switch interval."""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import pytest

from gpuallocd.daemon.eventloop import (
    EVENT_LOOP_ENV,
    SWITCH_INTERVAL_S,
    event_loop_name,
    run_event_loop,
)


def _loop_seen_by_a_coroutine() -> str:
    seen: list[str] = []

    async def report() -> None:
        seen.append(type(asyncio.get_running_loop()).__module__.split(".")[0])

    run_event_loop(report())
    return seen[0]


def test_the_daemon_loop_is_uvloop_exactly_when_uvloop_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run_event_loop runs the coroutine on uvloop's loop if importable, else asyncio's."""
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    expected = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    assert _loop_seen_by_a_coroutine() == expected
    assert event_loop_name() == expected


def test_the_environment_can_keep_asyncios_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert _loop_seen_by_a_coroutine() == "asyncio"
    assert event_loop_name() == "asyncio"


def test_the_loop_runs_with_the_short_switch_interval_and_restores_it() -> None:
    before = sys.getswitchinterval()
    seen: list[float] = []

    async def report() -> None:
        seen.append(sys.getswitchinterval())

    run_event_loop(report())
    assert seen == [pytest.approx(SWITCH_INTERVAL_S)]
    assert before > SWITCH_INTERVAL_S
    assert sys.getswitchinterval() == pytest.approx(before)
