"""Writing a file where its user says, safely when that user is root: `usage --plot FILE`.

The directory of FILE may be one another user can write. So, as the daemon's metrics
textfile is written (`metrics/textfile.py`), nothing there is followed or opened: through a
descriptor of the directory, a link (or anything but a regular file) at FILE's name is
refused; the bytes go to a new file of a random name, created with O_EXCL | O_NOFOLLOW;
a rename puts it at FILE's name, replacing the name and never what it pointed to (a hard
link to the old file keeps its bytes). The file is said written only once it is there.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

__all__ = ["RefusedPath", "write_new_file"]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class RefusedPath(Exception):
    """FILE is not one to write: a link, or not a regular file."""


def _refuse_anything_but_a_file(directory: int, path: Path) -> None:
    try:
        found = os.stat(path.name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(found.st_mode):
        raise RefusedPath(f"{path} is a symbolic link: refusing to write through it")
    if not stat.S_ISREG(found.st_mode):
        raise RefusedPath(f"{path} exists and is not a regular file")


def write_new_file(path: Path, body: bytes) -> None:
    """`body` at `path` as a new file (mode 0666 less the umask); RefusedPath where a link
    or something other than a regular file is there, OSError where it cannot be written."""
    directory = os.open(path.parent, _DIRECTORY)
    try:
        _refuse_anything_but_a_file(directory, path)
        temporary = f".{path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temporary, _CREATE, 0o666, dir_fd=directory)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(body)
            os.replace(temporary, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=directory)
            raise
        written = os.stat(path.name, dir_fd=directory, follow_symlinks=False)
        if not stat.S_ISREG(written.st_mode) or written.st_size != len(body):
            raise RefusedPath(f"{path} was replaced while it was written")
    finally:
        os.close(directory)
