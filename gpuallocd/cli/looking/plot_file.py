"""Writing a file where its user says, safely when that user is root: `usage --plot FILE`.

The directory of FILE may be one another user can write. So a link (or anything but a regular
file) at FILE's name is refused, and the bytes are written the one safe way
(`host/files.py`: a new file of a random name created with O_EXCL | O_NOFOLLOW, renamed over
the name, replacing the name and never what it pointed to: a hard link to the old file keeps
its bytes). The file is said written only once it is there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpuallocd.host.files import write_file

__all__ = ["RefusedPath", "write_new_file"]


class RefusedPath(Exception):
    """FILE is not one to write: a link, or not a regular file."""


def _refuse_anything_but_a_file(path: Path) -> None:
    try:
        found = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(found.st_mode):
        raise RefusedPath(f"{path} is a symbolic link: refusing to write through it")
    if not stat.S_ISREG(found.st_mode):
        raise RefusedPath(f"{path} exists and is not a regular file")


def write_new_file(path: Path, body: bytes) -> None:
    """`body` at `path` as a new file (mode 0666 less the umask); RefusedPath where a link
    or something other than a regular file is there, OSError where it cannot be written."""
    _refuse_anything_but_a_file(path)
    write_file(path, body, None)
    written = os.stat(path, follow_symlinks=False)
    if not stat.S_ISREG(written.st_mode) or written.st_size != len(body):
        raise RefusedPath(f"{path} was replaced while it was written")
