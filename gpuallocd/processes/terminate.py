"""Stopping the processes of a revoked lease that asked for it (`on_revoke: "terminate"`).

SIGTERM to every process of the lease at once; after the grace period SIGKILL to those still
running and to what they started meanwhile, the holder last (one second later), so that
`gpuallocctl run`, the holder of its command's lease, can still report why its command
ended. A signal goes only to the process with the start time recorded, through a pidfd
(`signals.py`), never to a later process that reuses its pid. The daemon must be allowed to
signal them: it is when it runs as root (the unit grants CAP_KILL).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Sequence

from gpuallocd.processes.families import UNKNOWN_START, Member
from gpuallocd.processes.proc import descendants, process_start_time
from gpuallocd.processes.signals import send_signal

__all__ = ["HOLDER_EXTRA_SECONDS", "signal_members", "terminate_family"]

log = logging.getLogger(__name__)

HOLDER_EXTRA_SECONDS = 1.0


def signal_members(members: Sequence[Member], sig: int) -> int:
    """Send `sig` to each member still running; how many were sent."""
    sent = 0
    for pid, start in members:
        if start == UNKNOWN_START:
            continue  # gone before it could be known
        try:
            sent += send_signal(pid, start, sig)
        except PermissionError:
            log.warning("not allowed to send %s to pid %d", signal.Signals(sig).name, pid)
    return sent


def _kill_with_descendants(members: Sequence[Member]) -> None:
    """SIGKILL to the members and to what they started since the SIGTERM."""
    found = dict.fromkeys(members)
    for pid, start in members:
        if start != UNKNOWN_START and process_start_time(pid) == start:
            found.update(dict.fromkeys(descendants(pid)))
    signal_members(list(found), signal.SIGKILL)


def terminate_family(
    members: Sequence[Member], holder: Member | None, grace_seconds: float
) -> None:
    """SIGTERM now; SIGKILL after `grace_seconds` (the holder one second after the rest)."""
    if not members:
        return
    loop = asyncio.get_running_loop()
    signal_members(members, signal.SIGTERM)
    others = [m for m in members if m != holder]
    loop.call_later(grace_seconds, _kill_with_descendants, others)
    if holder is not None:
        loop.call_later(
            grace_seconds + HOLDER_EXTRA_SECONDS, signal_members, [holder], signal.SIGKILL
        )
