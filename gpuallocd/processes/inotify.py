"""inotify(7), as much as watching files change takes: one descriptor, a watch per file,
the watches that fired. Through libc (ctypes): the standard library has no binding.

The kernel reports a change of a cgroup's `cgroup.events` (its `populated` line) as a
modification of that file, and the removal of the cgroup as the end of the watch.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

__all__ = ["Inotify"]

IN_MODIFY = 0x00000002
IN_DELETE_SELF = 0x00000400
IN_IGNORED = 0x00008000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
READ_BYTES = 64 * 1024


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


class Inotify:
    """One inotify descriptor (non-blocking): `add(path)` gives a watch number, `read()`
    the numbers of the watches with news."""

    def __init__(self) -> None:
        self._libc = _libc()
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        self._fd: int = fd

    def fileno(self) -> int:
        return self._fd

    def add(self, path: str) -> int:
        """Watch `path` for modification and removal; FileNotFoundError if it is gone."""
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(path), IN_MODIFY | IN_DELETE_SELF)
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
        return int(wd)

    def remove(self, wd: int) -> None:
        self._libc.inotify_rm_watch(self._fd, wd)  # gone already: EINVAL, nothing to do

    def read(self) -> set[int]:
        """The watches that fired since the last read (none when nothing is waiting)."""
        fired: set[int] = set()
        while True:
            try:
                data = os.read(self._fd, READ_BYTES)
            except BlockingIOError:
                return fired
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            offset = 0
            while offset + HEADER.size <= len(data):
                wd, _mask, _cookie, length = HEADER.unpack_from(data, offset)
                fired.add(wd)
                offset += HEADER.size + length

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
