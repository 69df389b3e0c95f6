"""One daemon per state directory: an exclusive lock on a file in it, and who holds it.

The lock is filelock's `UnixFileLock` on `gpuallocd.lock`: `flock(2)` on a file it opens with
`O_NOFOLLOW` (filelock 3.20.1 and later, the fix of CVE-2025-68146) and never truncates; the
kernel drops the lock when the process dies. The holder file is opened with `O_NOFOLLOW` too.
A symbolic link planted in the state directory makes the daemon refuse to start, never write
where it points.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from pathlib import Path

from filelock import Timeout, UnixFileLock

from gpuallocd.errors import AlreadyRunning, StateUnusable

__all__ = ["StateLock", "open_no_follow"]

_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC


def open_no_follow(path: Path, flags: int, mode: int = 0o600) -> int:
    """`os.open` that refuses a symbolic link (and anything but a regular file) at `path`."""
    try:
        fd = os.open(path, flags | _OPEN_FLAGS | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateUnusable(f"{path} is a symbolic link; refusing to follow it") from exc
        raise StateUnusable(f"cannot open {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StateUnusable(f"{path} is not a regular file")
    return fd


class StateLock:
    """Held for the daemon's whole life; a second daemon is refused with the holder's name."""

    def __init__(self, lock_path: Path) -> None:
        self._lock_path = lock_path
        self._holder_path = lock_path.with_suffix(".holder")
        self._lock = UnixFileLock(
            str(lock_path), timeout=0, mode=0o600, thread_local=False, is_singleton=False
        )

    def acquire(self, socket_path: str) -> None:
        try:
            self._lock.acquire(blocking=False)
        except Timeout:
            raise AlreadyRunning(
                f"another gpuallocd holds {self._lock_path} ({self._describe_holder()}); "
                "stop it first, or give this one another --state-dir"
            ) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StateUnusable(
                    f"{self._lock_path} is a symbolic link; refusing to follow it"
                ) from exc
            raise StateUnusable(f"cannot lock {self._lock_path}: {exc.strerror}") from exc
        self._refuse_unless_regular()
        self._write_holder(socket_path)

    def _refuse_unless_regular(self) -> None:
        """The locked path is a plain file of ours (not a FIFO or a device planted there)."""
        if not stat.S_ISREG(os.lstat(self._lock_path).st_mode):
            self._lock.release()
            raise StateUnusable(f"{self._lock_path} is not a regular file")

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self._holder_path.unlink()
        if self._lock.is_locked:
            self._lock.release()  # closes the descriptor, which drops the flock

    def _write_holder(self, socket_path: str) -> None:
        fd = open_no_follow(self._holder_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "w") as holder:
            holder.write(json.dumps({"pid": os.getpid(), "socket": socket_path}))

    def _describe_holder(self) -> str:
        try:
            fd = open_no_follow(self._holder_path, os.O_RDONLY)
            with os.fdopen(fd) as holder:
                found = json.loads(holder.read())
            return f"pid {found['pid']}, serving {found['socket']}"
        except (StateUnusable, OSError, ValueError, KeyError, TypeError):
            return "holder unknown"
