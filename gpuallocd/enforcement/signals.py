"""SIGTERM and SIGKILL to a process found using a GPU without a lease: through the checked
pidfds of `processes/signals.py`, so the signal reaches the process that was seen (same start
time) or nobody, never a newcomer that got its pid. Needs CAP_KILL for other users'
processes (the unit grants it)."""

from __future__ import annotations

from gpuallocd.processes.proc import process_start_time
from gpuallocd.processes.signals import signal_checked

__all__ = ["send_signal"]


def send_signal(pid: int, started: int | None, sig: int) -> bool:
    """Signal `pid` if it is still the process started at `started` (any process of that pid
    where the start time was not known); whether it was sent."""
    try:
        return signal_checked(
            pid, sig, lambda p: started is None or process_start_time(p) == started
        )
    except PermissionError:  # not allowed to signal it: reported, never acted on
        return False
