"""Stopping the processes of a lease: a revoked one that asked for it (`on_revoke:
"terminate"`), a preempted one at its acknowledgement or its deadline (docs/preemption.md).

SIGTERM to every process of the lease at once; after the grace period SIGKILL to those still
running and to what they started meanwhile, the holder last (one second later), so that
`gpuallocctl run`, the holder of its command's lease, can still report why its command
ended. A preemption sends its own signal earlier (`signal_members`) and asks for the kill
alone (`kill_family`). A signal goes only to the process with the start time recorded,
through a pidfd (`signals.py`), never to a later process that reuses its pid. The daemon must
be allowed to signal them: it is when it runs as root (the unit grants CAP_KILL).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence

from gpuallocd.host.proc import descendants, process_start_time
from gpuallocd.processes.families import UNKNOWN_START, Member
from gpuallocd.processes.signals import send_signal

__all__ = ["HOLDER_EXTRA_SECONDS", "kill_family", "signal_members", "terminate_family"]

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


def _kill_all(members: Callable[[], Sequence[Member]], holder: Member | None) -> None:
    """SIGKILL to the family as it is now, and to what its members started since the
    SIGTERM (where events did not report it), the holder spared for later."""
    family = list(members())
    found = dict.fromkeys(family)
    for pid, start in family:
        if start != UNKNOWN_START and process_start_time(pid) == start:
            found.update(dict.fromkeys(descendants(pid)))
    found.pop(holder, None)  # type: ignore[arg-type]
    signal_members(list(found), signal.SIGKILL)


def terminate_family(
    members: Callable[[], Sequence[Member]],
    holder: Member | None,
    grace_seconds: float,
    done: Callable[[], None] = lambda: None,
) -> None:
    """SIGTERM to `members()` now; SIGKILL to `members()` as they are after `grace_seconds`
    (a process forked meanwhile, by a SIGTERM handler say, included), the holder one second
    after the rest; then `done()`."""
    signal_members(members(), signal.SIGTERM)
    kill_family(members, holder, grace_seconds, done)


def kill_family(
    members: Callable[[], Sequence[Member]],
    holder: Member | None,
    delay_seconds: float = 0.0,
    done: Callable[[], None] = lambda: None,
) -> None:
    """SIGKILL to `members()` as they are `delay_seconds` from now (what they forked since
    included), the holder one second after the rest; then `done()`."""
    loop = asyncio.get_running_loop()
    if delay_seconds <= 0:
        _kill_all(members, holder)
    else:
        loop.call_later(delay_seconds, _kill_all, members, holder)
    loop.call_later(max(0.0, delay_seconds) + HOLDER_EXTRA_SECONDS, _last, holder, done)


def _last(holder: Member | None, done: Callable[[], None]) -> None:
    if holder is not None:
        signal_members([holder], signal.SIGKILL)
    done()
