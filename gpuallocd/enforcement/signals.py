"""SIGTERM and SIGKILL to a process found using a GPU without a lease, through a pidfd: the
signal reaches the process that was seen (same start time) or nobody, never a newcomer that
got its pid. Needs CAP_KILL for other users' processes (the unit grants it)."""

from __future__ import annotations

import contextlib
import os
import signal

from gpuallocd.enforcement.proc_facts import start_time

__all__ = ["send_signal"]


def send_signal(pid: int, started: int | None, sig: int) -> bool:
    """Signal `pid` if it is still the process started at `started`; whether it was sent."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfd here: check, then signal by pid
        return started == start_time(pid) and _kill(pid, sig)
    try:
        if started is not None and start_time(pid) != started:
            return False
        signal.pidfd_send_signal(fd, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # a seccomp filter without pidfd_send_signal: by pid, still held
        return _kill(pid, sig)
    finally:
        os.close(fd)


def _kill(pid: int, sig: int) -> bool:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
        return True
    return False
