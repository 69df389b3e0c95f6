"""What the daemon checks before it trusts its state directory and its socket's directory.

As PostgreSQL and sshd do: a directory the daemon writes in must belong to it (or to root)
and be writable by nobody else, or another local user could plant links there that make the
daemon overwrite files it should never touch. The files in the state directory must be
regular files of the daemon's own. And the ledger must be there: an empty ledger, or a
missing one in a state directory that has held a ledger (its `initialised` marker says so), is
never taken silently for a new one (that would forget every lease and grant their GPUs
again); `gpuallocd --init` creates one on purpose. A state directory that never held a ledger
(a new install, a first `make daemon`) gets one, and its marker, on the first start.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from gpuallocd.daemon.startup.statelock import open_no_follow
from gpuallocd.errors import StateUnusable

__all__ = [
    "INITIALISED_MARKER",
    "LEDGER_COMPANIONS",
    "check_ledger",
    "check_state_files",
    "mark_initialised",
    "prepare_private_dir",
    "read_private_file",
    "trusted_owners",
]

log = logging.getLogger(__name__)

LEDGER_COMPANIONS = ("-wal", "-shm", "-journal")
INITIALISED_MARKER = "initialised"  # beside the ledger: this directory has held a ledger


def trusted_owners() -> frozenset[int]:
    return frozenset({os.geteuid(), 0})


MAX_PRIVATE_FILE = 4096


def read_private_file(path: Path, what: str) -> str:
    """The text of a file only the daemon may read (a secret): a regular file, not a link,
    of the daemon's user or root, with no permission for group or others (0600, 0400)."""
    fd = open_no_follow(path, os.O_RDONLY)
    try:
        found = os.fstat(fd)
        if found.st_uid not in trusted_owners():
            raise StateUnusable(
                f"the {what} {path} belongs to uid {found.st_uid}, not to this daemon's user "
                "or root: chown root it"
            )
        if found.st_mode & 0o077:
            raise StateUnusable(
                f"the {what} {path} is open to others (mode {stat.S_IMODE(found.st_mode):o}): "
                "chmod 600 it, and make a new secret (it may have been read)"
            )
        return os.read(fd, MAX_PRIVATE_FILE).decode(errors="replace").strip()
    finally:
        os.close(fd)


def _check_dir(path: Path, what: str) -> None:
    try:
        found = os.lstat(path)
    except OSError as exc:
        raise StateUnusable(f"cannot use the {what} {path}: {exc.strerror}") from exc
    if stat.S_ISLNK(found.st_mode) or not stat.S_ISDIR(found.st_mode):
        raise StateUnusable(f"the {what} {path} is not a directory (a link is refused too)")
    if found.st_uid not in trusted_owners():
        raise StateUnusable(
            f"the {what} {path} belongs to uid {found.st_uid}, not to this daemon's user or "
            "root; another user could put files in it: chown it or choose another"
        )
    if found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StateUnusable(
            f"the {what} {path} is writable by others (mode {stat.S_IMODE(found.st_mode):o}); "
            "they could plant links in it: chmod go-w it"
        )


def prepare_private_dir(path: Path, what: str, mode: int) -> None:
    """Create `path` with `mode` if it is missing, then check that only we can write in it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=mode, exist_ok=True)
    except OSError as exc:
        raise StateUnusable(f"cannot create the {what} {path}: {exc.strerror}") from exc
    _check_dir(path, what)


def check_state_files(paths: Iterable[Path]) -> None:
    """Each of `paths` that exists is a regular file of ours, not a link."""
    for path in paths:
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(found.st_mode):
            raise StateUnusable(f"{path} is not a regular file (a link is refused)")
        if found.st_uid not in trusted_owners():
            raise StateUnusable(f"{path} belongs to uid {found.st_uid}, not to this daemon")


def _size(path: Path) -> int | None:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return None


def mark_initialised(path: Path) -> None:
    """Note beside the ledger `path` that this state directory holds a ledger now."""
    marker = path.with_name(INITIALISED_MARKER)
    if not marker.exists():
        fd = open_no_follow(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as out:
            out.write(f"a gpuallocd ledger was created here at {time.ctime()}\n")


def check_ledger(path: Path, *, initialise: bool) -> None:
    """Refuse an empty ledger, or a missing one where a ledger was before, unless
    `initialise`; then an empty one is set aside. A first start creates one.

    Empty means the file has 0 bytes and no write-ahead log holds its pages.
    """
    size, wal = _size(path), _size(path.with_name(path.name + "-wal"))
    if size or wal:
        return
    first_start = size is None and not path.with_name(INITIALISED_MARKER).exists()
    if first_start:
        log.info("creating a new ledger at %s (a state directory that never held one)", path)
        return
    if not initialise:
        if size is None:
            raise StateUnusable(
                f"there is no ledger at {path}, though this state directory held one "
                f"({path.with_name(INITIALISED_MARKER)}); restore it from a backup, or run "
                "gpuallocd once with --init to start a new, empty one"
            )
        raise StateUnusable(
            f"the ledger {path} is empty (0 bytes): its leases are lost, and serving would "
            "grant their GPUs again; restore it from a backup, or start with --init to set "
            "it aside and begin a new, empty ledger"
        )
    if size is not None:
        aside = path.with_name(f"{path.name}.empty-{int(time.time())}")
        os.rename(path, aside)
        log.warning("the ledger %s was empty; kept as %s, starting a new one", path, aside)
    else:
        log.info("creating a new ledger at %s", path)
