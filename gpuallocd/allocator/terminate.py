"""Stopping the processes of a revoked lease that asked for it (`on_revoke: "terminate"`).

SIGTERM to every process of the lease at once; after the grace period SIGKILL to those still
running, the holder last (one second later), so that `gpuallocctl run`, the holder of its
command's lease, can still report why its command ended. A signal goes only to a process
whose start time is the one recorded, never to a later process that reuses its pid. The
daemon must be allowed to signal them: it is when it runs as root.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Sequence

from gpuallocd.allocator.families import Member

__all__ = ["HOLDER_EXTRA_SECONDS", "terminate_family"]

log = logging.getLogger(__name__)

HOLDER_EXTRA_SECONDS = 1.0
StartTimeOf = Callable[[int], int | None]


def _signal_all(members: Sequence[Member], sig: int, start_time_of: StartTimeOf) -> None:
    for pid, start in members:
        if start_time_of(pid) != start:
            continue  # gone already, or its pid is someone else's now
        with contextlib.suppress(ProcessLookupError):
            try:
                os.kill(pid, sig)
            except PermissionError:
                log.warning("not allowed to send %s to pid %d", signal.Signals(sig).name, pid)


def terminate_family(
    members: Sequence[Member],
    holder: Member | None,
    grace_seconds: float,
    start_time_of: StartTimeOf,
) -> None:
    """SIGTERM now; SIGKILL after `grace_seconds` (the holder one second after the rest)."""
    if not members:
        return
    loop = asyncio.get_running_loop()
    _signal_all(members, signal.SIGTERM, start_time_of)
    others = [m for m in members if m != holder]
    loop.call_later(grace_seconds, _signal_all, others, signal.SIGKILL, start_time_of)
    if holder is not None:
        loop.call_later(
            grace_seconds + HOLDER_EXTRA_SECONDS,
            _signal_all,
            [holder],
            signal.SIGKILL,
            start_time_of,
        )
