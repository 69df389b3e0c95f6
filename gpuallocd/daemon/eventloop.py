"""The daemon's event loop: uvloop where it is installed (the `fast` extra), else asyncio's.

uvloop serves the same asyncio API from libuv with less Python per I/O event: about a tenth
of a request's CPU time. It is optional: without it the daemon behaves the same, a little
slower. `GPUALLOCD_EVENT_LOOP=asyncio` keeps asyncio's loop even where uvloop is installed.

The interpreter's thread switch interval is shortened for the daemon's whole life. A group
commit runs on the worker's commit thread (`allocator/worker.py`), and that thread needs the
interpreter lock twice: to start the COMMIT and to finish it once the disk has synced. Under
load the event loop thread always holds the lock, and by default it gives it up only every
5 ms: each group commit waited that long for a lock it holds for a few microseconds, while
the callers of the batch and every call queued behind it waited too. The loop thread gives
up the lock only when another thread asks for it, so a short interval costs nothing while
the commit thread is idle.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Coroutine
from typing import Any

__all__ = ["EVENT_LOOP_ENV", "SWITCH_INTERVAL_S", "event_loop_name", "run_event_loop"]

log = logging.getLogger(__name__)

EVENT_LOOP_ENV = "GPUALLOCD_EVENT_LOOP"
# How long a thread may hold the interpreter lock while another thread waits for it.
SWITCH_INTERVAL_S = 50e-6


def _uvloop() -> Any:
    if os.environ.get(EVENT_LOOP_ENV) == "asyncio":
        return None
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None


def event_loop_name() -> str:
    """`uvloop` or `asyncio`: the loop `run_event_loop` would use."""
    return "asyncio" if _uvloop() is None else "uvloop"


def run_event_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` to its end on a new event loop, with the daemon's thread switch interval."""
    uvloop = _uvloop()
    previous = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        if uvloop is None:
            asyncio.run(main)
            return
        log.debug("event loop: uvloop %s", uvloop.__version__)
        uvloop.run(main)
    finally:
        sys.setswitchinterval(previous)
