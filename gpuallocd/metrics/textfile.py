"""Writing the metrics file for node_exporter's textfile collector, atomically and safely.

The textfile directory may be one that other users can write (a careless setup), so the
daemon, running as root, writes it the one safe way (`host/files.py`): a new file of a random
name created with O_EXCL | O_NOFOLLOW through a descriptor of the directory, its mode set on
the open file, renamed over the name (never through a link at it).
"""

from __future__ import annotations

from pathlib import Path

from gpuallocd.host.files import write_file

__all__ = ["write_atomically"]

# node_exporter runs as its own user: it must be able to read the file whatever the umask.
TEXTFILE_MODE = 0o644


def write_atomically(path: Path, body: bytes) -> None:
    """Replace `path` with `body` in one rename: a reader sees the old file or the new one.

    The temporary file's name does not end in `.prom`, so the collector never reads it half
    written.
    """
    write_file(path, body, TEXTFILE_MODE)
