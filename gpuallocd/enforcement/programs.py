"""Which program a process runs, as far as a user cannot forge it: the file the kernel says it
executes (/proc/PID/exe), named by its path only where that name is root's to give.

A process's name in the kernel (`comm`, set by `prctl(PR_SET_NAME)`) and its argv[0] (`exec -a`)
are its owner's to choose, and so is the name of a copy or a link in a directory they may
write. The program is trusted when the file the process runs (compared by device and inode,
so a rename or a replacement in between is seen) is a regular file of root's that no one else
may write, in directories of root's up to `/` that no one else may write either (a sticky
directory of root's counts as closed: nobody else may rename or remove what root put there,
and a file with more than one link is not trusted below one, where a user's hard link of a
root file would otherwise lend it a name).
Reading another user's /proc/PID/exe takes CAP_SYS_PTRACE, which the unit grants; where it is
refused the program is unknown, and nothing is exempt by it.

The file says which program was started, not which code runs in it: a user who starts root's
program with their own library preloaded (`LD_PRELOAD`, `LD_AUDIT`) or under a tracer runs
their code under its name. Such a process is exempt by no program. A process of a user's can
still be changed from inside by its owner in ways no outside look sees; docs/enforcement.md
says so, and an exemption by program is best kept to programs that system accounts run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpuallocd.host.proc import environ_value, read_environ, tracer_of

__all__ = ["closed_to_users", "trusted_program"]


def closed_to_users(info: os.stat_result) -> bool:
    """Root's, and writable by nobody else (a sticky directory's entries stay root's)."""
    if info.st_uid != 0:
        return False
    sticky = stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
    return not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or bool(sticky)


def _directories_closed(directory: str) -> tuple[bool, bool]:
    """Whether `directory` and those above it are closed to users, and whether one of them
    is a sticky directory others may write (where a hard link of root's file may appear)."""
    shared = False
    while True:
        try:
            info = os.stat(directory, follow_symlinks=False)
        except OSError:
            return False, shared
        if not stat.S_ISDIR(info.st_mode) or not closed_to_users(info):
            return False, shared
        shared = shared or bool(info.st_mode & stat.S_IWOTH)
        parent = os.path.dirname(directory)
        if parent == directory:
            return True, shared
        directory = parent


def trusted_program(pid: int, proc: str = "/proc") -> str | None:
    """The file name of the program `pid` runs, where only root can have put it there under
    that name; None otherwise (or when the process is gone)."""
    exe = f"{proc}/{pid}/exe"
    try:
        path = os.readlink(exe)
        running = os.stat(exe)
    except OSError:
        return None
    if not path.startswith("/"):
        return None  # "(deleted)" names, or a file outside our mount namespace
    try:
        named = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    same = (named.st_dev, named.st_ino) == (running.st_dev, running.st_ino)
    if not same or not stat.S_ISREG(named.st_mode) or not closed_to_users(named):
        return None
    closed, shared = _directories_closed(os.path.dirname(path))
    if not closed or (shared and named.st_nlink != 1):
        return None  # a user's hard link of root's file, in /tmp, names nothing of root's
    return os.path.basename(path)


def runs_foreign_code(pid: int, proc: str = "/proc") -> bool:
    """Whether the process may run code that is not its program's: a library preloaded or
    audited through its environment, a tracer attached, or a look that was refused."""
    environ = read_environ(pid, Path(proc))
    if environ is None:
        return True
    if any(environ_value(environ, name) for name in (b"LD_PRELOAD", b"LD_AUDIT")):
        return True
    return tracer_of(pid, Path(proc)) != 0
