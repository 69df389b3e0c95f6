"""Noticing that the socket the daemon serves on was removed or replaced.

A daemon whose socket file is gone still runs, but nobody can reach it. The daemon does not
bind again by itself: whoever removed the file may have put something else in its place, and
the service manager (systemd's `Restart=on-failure`) is the one to start it afresh, with the
state directory and socket checks of a normal start. So the watch checks the path every few
seconds and, when the socket there is not the one it bound, stops the daemon with
`StateUnusable` (exit code 73) and a message that says what happened.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from gpuallocd.errors import StateUnusable

__all__ = ["SOCKET_CHECK_SECONDS", "SocketWatch"]

SOCKET_CHECK_SECONDS = 2.0


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


class SocketWatch:
    """Remembers the bound socket file; `problem()` says what happened to it, if anything."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._bound = _identity(path)

    def problem(self) -> StateUnusable | None:
        now = _identity(self.path)
        if now == self._bound:
            return None
        what = "was removed" if now is None else "was replaced by another file"
        return StateUnusable(
            f"the socket {self.path} {what}; nobody can reach this daemon any more, so it "
            "stops (its service manager starts it again)"
        )

    async def until_gone(self, interval: float = SOCKET_CHECK_SECONDS) -> StateUnusable:
        """Return the problem once the socket file is gone or replaced."""
        while True:
            await asyncio.sleep(interval)
            problem = self.problem()
            if problem is not None:
                return problem
