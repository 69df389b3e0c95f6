"""Writing the metrics file for node_exporter's textfile collector, atomically and safely.

The textfile directory may be one that other users can write (a careless setup), so the
daemon, running as root, never follows a link there and never uses a name another user can
guess: the temporary file gets a random name and is created with O_EXCL | O_NOFOLLOW
(nothing already there, link or file, is ever opened), through a descriptor of the
directory; its mode is set on the open file, and the rename replaces the name, never what
a link at it points to.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["write_atomically"]

# node_exporter runs as its own user: it must be able to read the file whatever the umask.
TEXTFILE_MODE = 0o644
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def write_atomically(path: Path, body: bytes) -> None:
    """Replace `path` with `body` in one rename: a reader sees the old file or the new one.

    The temporary file sits in the same directory (a rename never crosses file systems) and
    its name does not end in `.prom`, so the collector never reads it half written.
    """
    directory = os.open(path.parent, _DIRECTORY)
    try:
        temporary = f".{path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temporary, _CREATE, 0o600, dir_fd=directory)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(body)
                os.fchmod(file.fileno(), TEXTFILE_MODE)
            os.replace(temporary, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=directory)
            raise
    finally:
        os.close(directory)
