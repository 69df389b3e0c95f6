"""Who owns a process: the uid of /proc/PID, for telling leased use from foreign use."""

from __future__ import annotations

import os

__all__ = ["process_uid"]


def process_uid(pid: int) -> int | None:
    """The owner uid of a running process; None when it is gone or cannot be seen.

    Inside a PID namespace (a container) the GPU driver's pids may not be visible here; the
    daemon then cannot tell whose the process is and reports the uid as unknown.
    """
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except (OSError, ValueError):
        return None
