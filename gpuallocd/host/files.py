"""Writing a file where another user may reach it, the one way: as root into a directory others
may write (the metrics textfile), at a path a user named (`usage --plot FILE`), or a file that
must never be seen half written (CDI specs, the notifier's channels and cursors).

The directory's path is resolved once, to a descriptor; the bytes go to a new file of a random
name there, created with O_EXCL | O_NOFOLLOW (nothing already there, link or file, is ever
opened); its mode is set on the open file, where the umask has no say (`mode=None`: 0666 less
the umask, as any new file of the user's); with `durable`, the file is fsynced before and the
directory after the rename. The rename puts it at the name, replacing the name and never what
a link there points to, so a reader sees the old file or the new one, whole. A failure leaves
no temporary file behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["write_file"]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def write_file(path: Path, body: bytes, mode: int | None, *, durable: bool = False) -> None:
    """Replace `path` with `body`, a file of `mode`, in one rename (OSError where it cannot).

    The temporary name (`.NAME.<random>.tmp`) is in the same directory, so the rename never
    crosses file systems, and ends in `.tmp`, so no collector reads it half written.
    """
    directory = os.open(path.parent, _DIRECTORY)
    try:
        temporary = f".{path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temporary, _CREATE, 0o666 if mode is None else 0o600, dir_fd=directory)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(body)
                if mode is not None:
                    os.fchmod(file.fileno(), mode)
                if durable:
                    file.flush()
                    os.fsync(file.fileno())
            os.replace(temporary, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=directory)
            raise
        if durable:
            os.fsync(directory)
    finally:
        os.close(directory)
