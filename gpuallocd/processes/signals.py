"""Signals that reach the process meant, and no other.

A pid names a process only until it is reaped; then the kernel may give it to anyone's next
process. So a signal goes through a pidfd (`pidfd_open`, Linux 5.3 and later): the pidfd is
opened first, the process is then checked (its start time is the one recorded, or whatever
the caller asks), and `pidfd_send_signal` delivers to the process the pidfd was opened on,
which cannot be another one. Had the pid been reused before the pidfd was opened, the check
sees the newcomer and nothing is sent. Where pidfds are missing (older kernels, sandboxes
that refuse them) the check comes right before `kill(2)`, which leaves a window of a few
microseconds. Revoke (`terminate.py`), share enforcement, unleased use and whoever else
stops a process use `send_signal` or `signal_checked`: the one home of this rule.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

from gpuallocd.host.proc import process_start_time

__all__ = ["send_signal", "signal_checked"]


def _open(pid: int) -> int | None:
    """A pidfd of `pid`; None where pidfds cannot be had. ProcessLookupError: no such pid."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(pid)
    except ProcessLookupError:
        raise
    except OSError:  # ENOSYS or EPERM from a seccomp filter
        return None
    return fd


def signal_checked(pid: int, sig: int, still: Callable[[int], bool]) -> bool:
    """Send `sig` to `pid` if `still(pid)` holds of the process the pid names now, and only
    to that process; whether it was sent. PermissionError where the daemon may not."""
    try:
        fd = _open(pid)
    except ProcessLookupError:
        return False
    if fd is None:
        if not still(pid):
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            return True
        return False
    try:
        if not still(pid):
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False  # it exited after the check
    finally:
        os.close(fd)


def send_signal(pid: int, start_time: int | None, sig: int) -> bool:
    """Send `sig` to the process `pid` that started at `start_time` (clock ticks since boot),
    never to a later owner of its pid (None: whatever process has the pid, where its start
    was never known); whether it was sent. PermissionError where the daemon may not."""
    return signal_checked(
        pid, sig, lambda p: start_time is None or process_start_time(p) == start_time
    )
