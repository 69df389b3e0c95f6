"""The daemon runs on uvloop where it is installed, and on asyncio's loop otherwise."""

from __future__ import annotations

import asyncio
import importlib.util

from gpuallocd.daemon.eventloop import event_loop_name, run_event_loop


def test_the_daemon_loop_is_uvloop_exactly_when_uvloop_is_installed() -> None:
    """run_event_loop runs the coroutine on uvloop's loop if importable, else asyncio's."""
    seen: list[str] = []

    async def report() -> None:
        seen.append(type(asyncio.get_running_loop()).__module__.split(".")[0])

    run_event_loop(report())
    expected = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    assert seen == [expected]
    assert event_loop_name() == expected
