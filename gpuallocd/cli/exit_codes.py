"""The exit codes of `gpuallocctl` (docs/cli.md, Exit codes), without click.

`errors.py` decides which error gets which code; the numbers live here so that `run`'s
click-free path (`leasing/quick_run.py`) can name them without importing click.
"""

from __future__ import annotations

__all__ = [
    "EXIT_CAPACITY",
    "EXIT_ERROR",
    "EXIT_NO_DAEMON",
    "EXIT_PERMISSION",
    "EXIT_PREEMPTED",
    "EXIT_QUOTA",
    "EXIT_REVOKED",
    "EXIT_USAGE",
]

EXIT_ERROR = 1  # any other error
EXIT_USAGE = 2  # the request or the command line is wrong (click uses 2 for its own too)
EXIT_NO_DAEMON = 3  # no daemon answers on the socket
EXIT_CAPACITY = 4  # nothing fits now: GPUs unavailable or busy; the same call may work later
EXIT_PERMISSION = 5  # not yours, or root's (or an admin's) to do
EXIT_QUOTA = 6  # over one of the caller's limits: not now, and not by waiting
EXIT_REVOKED = 7  # `run`: an admin revoked the lease and its command was stopped
EXIT_PREEMPTED = 8  # `run`: the lease was preempted (docs/preemption.md), without --requeue
