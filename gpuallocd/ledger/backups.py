"""Backups of the ledger: SQLite's online backup into `backups/`, each checked before it counts.

A backup is read from a connection of its own in one step (one read transaction: a
consistent snapshot, and in WAL mode the writer is never blocked). It is written to a new
file under a temporary name (created with O_EXCL | O_NOFOLLOW, mode 0600), switched to a
rollback journal (so it is one self-contained file), checked with `PRAGMA quick_check`,
fsynced, then renamed to `ledger-<UTC time>.sqlite3` and the directory fsynced. A backup
that fails its check is removed and never counts. The oldest good ones beyond `keep` are
removed. Names sort by time: the newest good backup is the last that passes its check.

Before a ledger is upgraded to a new schema version, one more is taken the same way, named
`upgrade-from-vN-to-vM-<UTC time>.sqlite3`: never pruned, never taken for a recovery's
base, it is the way back for a gpuallocd that reads only version N.
"""

from __future__ import annotations

import calendar
import contextlib
import os
import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BACKUP_PREFIX",
    "BackupInfo",
    "list_backups",
    "newest_good_backup",
    "quick_check",
    "take_backup",
    "take_upgrade_backup",
    "verify_backups",
    "way_back",
]

BACKUP_PREFIX = "ledger-"
BACKUP_SUFFIX = ".sqlite3"
TEMP_PREFIX = ".partial-"
UPGRADE_PREFIX = "upgrade-from-v"  # upgrade-from-v4-to-v5-<UTC time>.sqlite3
_UPGRADE_NAME = re.compile(
    rf"{UPGRADE_PREFIX}(?P<found>\d+)-to-v(?P<target>\d+)-(?P<stamp>[0-9T.Z]+)"
    rf"{re.escape(BACKUP_SUFFIX)}"
)


@dataclass(frozen=True)
class BackupInfo:
    """One backup file and what its check found ("ok", else SQLite's first complaint)."""

    path: Path
    taken_at: float
    size_bytes: int
    check: str

    @property
    def good(self) -> bool:
        return self.check == "ok"

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.path.name,
            "taken_at": self.taken_at,
            "size_bytes": self.size_bytes,
            "check": self.check,
        }


def quick_check(path: Path, *, immutable: bool = False) -> str:
    """ "ok", or why SQLite finds the database at `path` damaged (first problem, one line).

    `immutable`: the file is never written (a backup): read without its -wal and -shm.
    """
    flags = "immutable=1" if immutable else "mode=ro"
    try:
        conn = sqlite3.connect(f"file:{path}?{flags}", uri=True)
    except sqlite3.Error as exc:
        return _one_line(exc)
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
        found = [str(row[0]) for row in rows]
        if found != ["ok"]:
            return _one_line(found[0] if found else "no answer to quick_check")
        conn.execute("SELECT count(*) FROM meta").fetchone()  # a ledger, not any database
        return "ok"
    except sqlite3.Error as exc:
        return _one_line(exc)
    finally:
        conn.close()


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:300]


def _stamp(now: float) -> str:
    micro = round((now % 1) * 1_000_000) % 1_000_000
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f".{micro:06d}Z"


def _taken_at(path: Path) -> float | None:
    stem = path.name.removeprefix(BACKUP_PREFIX).removesuffix(BACKUP_SUFFIX)
    try:
        seconds, _, fraction = stem.rstrip("Z").partition(".")
        parsed = time.strptime(seconds, "%Y%m%dT%H%M%S")
        return float(calendar.timegm(parsed)) + int(fraction or "0") / 1_000_000
    except ValueError:
        return None


def _fsync_path(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_private(path: Path) -> None:
    """A new empty file, mode 0600, never through a link (O_EXCL refuses any existing name)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)


def _copy_into(ledger: Path, target: Path) -> None:
    source = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        dest = sqlite3.connect(str(target))
        try:
            source.backup(dest)  # every page in one step: one consistent snapshot
            dest.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            dest.close()
    finally:
        source.close()


def take_backup(ledger: Path, directory: Path, keep: int, now: float | None = None) -> BackupInfo:
    """Back up `ledger` into `directory` (which the caller has checked is private), check it,
    and keep the newest `keep` good ones. Raises sqlite3.Error or OSError when it cannot be
    taken; a backup that fails its check is removed and raises ValueError."""
    taken = time.time() if now is None else now
    final = directory / f"{BACKUP_PREFIX}{_stamp(taken)}{BACKUP_SUFFIX}"
    size = _write_checked(ledger, final)
    _prune(directory, keep)
    return BackupInfo(final, taken, size, "ok")


def take_upgrade_backup(
    ledger: Path, directory: Path, found: int, target: int, now: float
) -> BackupInfo:
    """Back up `ledger` (schema version `found`) before it is upgraded to `target`, as
    `take_backup` does, under a name of its own that no pruning removes: the way back for a
    gpuallocd that reads only `found` (`way_back`)."""
    final = directory / f"{UPGRADE_PREFIX}{found}-to-v{target}-{_stamp(now)}{BACKUP_SUFFIX}"
    return BackupInfo(final, now, _write_checked(ledger, final), "ok")


def way_back(directory: Path, reads_up_to: int) -> Path | None:
    """The newest backup taken before an upgrade past `reads_up_to`, of a ledger of a version
    up to it: what a gpuallocd reading up to that version may serve again."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None
    found = []
    for name in names:
        parsed = _UPGRADE_NAME.fullmatch(name)
        if parsed and int(parsed["found"]) <= reads_up_to < int(parsed["target"]):
            found.append((parsed["stamp"], name))
    return directory / max(found)[1] if found else None


def _write_checked(ledger: Path, final: Path) -> int:
    """`ledger` copied to `final` through a temporary name, checked, fsynced, renamed; the
    size of the copy."""
    directory = final.parent
    temp = directory / f"{TEMP_PREFIX}{os.getpid()}-{time.monotonic_ns()}{BACKUP_SUFFIX}"
    _create_private(temp)
    try:
        _copy_into(ledger, temp)
        check = quick_check(temp, immutable=True)
        if check != "ok":
            raise ValueError(f"the backup failed its check: {check}")
        _fsync_path(temp)
        os.rename(temp, final)
    except BaseException:
        for leftover in (temp, temp.with_name(temp.name + "-journal")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
        raise
    _fsync_path(directory, os.O_RDONLY | os.O_DIRECTORY)
    return os.lstat(final).st_size


def _backup_files(directory: Path) -> list[Path]:
    """The backups' files, oldest first (regular files only; links are never followed)."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if not (name.startswith(BACKUP_PREFIX) and name.endswith(BACKUP_SUFFIX)):
            continue
        path = directory / name
        with contextlib.suppress(OSError):
            if os.lstat(path).st_mode & 0o170000 == 0o100000:  # S_ISREG, no link
                found.append(path)
    return found


def _prune(directory: Path, keep: int) -> None:
    """Remove the oldest backups beyond `keep` (with `keep` 0, every one)."""
    files = _backup_files(directory)
    for old in files[: max(0, len(files) - keep)]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(old)


def _info(path: Path) -> BackupInfo:
    size = os.lstat(path).st_size
    return BackupInfo(path, _taken_at(path) or 0.0, size, quick_check(path, immutable=True))


def verify_backups(directory: Path) -> list[BackupInfo]:
    """Every backup in `directory`, oldest first, each with its check."""
    return [_info(path) for path in _backup_files(directory)]


def list_backups(directory: Path) -> list[BackupInfo]:
    """Every backup in `directory`, oldest first, unchecked (check "unchecked")."""
    return [
        BackupInfo(p, _taken_at(p) or 0.0, os.lstat(p).st_size, "unchecked")
        for p in _backup_files(directory)
    ]


def newest_good_backup(directory: Path) -> BackupInfo | None:
    """The newest backup that passes its check, if any."""
    for path in reversed(_backup_files(directory)):
        info = _info(path)
        if info.good:
            return info
    return None
