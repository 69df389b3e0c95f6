"""One daemon per state directory: an exclusive file lock, and who holds it."""

from __future__ import annotations

import json
import os
from pathlib import Path

from filelock import FileLock, Timeout

from gpuallocd.errors import AlreadyRunning

__all__ = ["StateLock"]


class StateLock:
    """Held for the daemon's whole life; a second daemon is refused with the holder's name."""

    def __init__(self, lock_path: Path) -> None:
        self._lock = FileLock(lock_path, timeout=0)
        self._holder_path = lock_path.with_suffix(".holder")

    def acquire(self, socket_path: str) -> None:
        try:
            self._lock.acquire()
        except Timeout as exc:
            raise AlreadyRunning(
                f"another gpuallocd holds {self._lock.lock_file} ({self._describe_holder()}); "
                "stop it first, or give this one another --state-dir"
            ) from exc
        self._holder_path.write_text(json.dumps({"pid": os.getpid(), "socket": socket_path}))

    def release(self) -> None:
        self._holder_path.unlink(missing_ok=True)
        self._lock.release()

    def _describe_holder(self) -> str:
        try:
            holder = json.loads(self._holder_path.read_text())
            return f"pid {holder['pid']}, serving {holder['socket']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "holder unknown"
