"""Writing the metrics file for node_exporter's textfile collector, atomically."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_atomically"]

# node_exporter runs as its own user: it must be able to read the file whatever the umask.
TEXTFILE_MODE = 0o644


def write_atomically(path: Path, body: bytes) -> None:
    """Replace `path` with `body` in one rename: a reader sees the old file or the new one.

    The temporary file sits in the same directory (a rename never crosses file systems) and
    its name does not end in `.prom`, so the collector never reads it half written.
    """
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as file:
            file.write(body)
        os.chmod(temporary, TEXTFILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
