"""The daemon's event loop: uvloop where it is installed (the `fast` extra), else asyncio's.

uvloop serves the same asyncio API from libuv with less Python per I/O event: about a tenth
of a request's CPU time. It is optional: without it the daemon behaves the same, a little
slower. `GPUALLOCD_EVENT_LOOP=asyncio` keeps asyncio's loop even where uvloop is installed.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Coroutine
from typing import Any

__all__ = ["event_loop_name", "run_event_loop"]

log = logging.getLogger(__name__)


def _uvloop() -> Any:
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None


def event_loop_name() -> str:
    """`uvloop` or `asyncio`: the loop `run_event_loop` would use."""
    return "asyncio" if _uvloop() is None else "uvloop"


def run_event_loop(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` to its end on a new event loop."""
    uvloop = _uvloop()
    if uvloop is None:
        asyncio.run(main)
        return
    log.debug("event loop: uvloop %s", uvloop.__version__)
    uvloop.run(main)
