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

The file says which program was started, not which code runs in it. A process runs only
root's code, as far as the kernel can tell (`runs_foreign_code` says where it may not), when:

- its environment holds none of the loader's variables (`LD_PRELOAD`, `LD_AUDIT`,
  `LD_LIBRARY_PATH`: any entry, any value, any occurrence, for the loader takes the last);
  a library once loaded may rename its own entry, so this is the lesser look;
- every file it maps executable (/proc/PID/smaps) is root's in root's directories by the
  rule above, and the very file of that name (its device and inode as smaps shows them, or
  as /proc/PID/map_files resolves them where smaps shows the file system's own device, as
  on a btrfs subvolume): a library preloaded, audited, found on a library path or
  dlopen()ed later stays mapped, and a memfd's or a deleted file's name is no file of root's;
- none of those mappings holds a page written since it was mapped: code patched through
  /proc/PID/mem or ptrace is copied on write, and the copy is anonymous memory;
- no tracer is attached, and it runs in the daemon's user namespace: inside one of their
  own a user holds every capability over it, may mount over root's names and may set what
  /proc/PID/exe shows (`PR_SET_MM_MAP`).

Anonymous executable memory is no file and is not judged: a JIT makes it (gnome-shell's
JavaScript, a shader compiler). Code reaches it from code the looks above see, or from a
user's other process steering this one through /proc/PID/mem, which no look sees: an
exemption by program is a trust in the users who run it, best kept to programs that system
accounts run (docs/enforcement.md). Which facts are the kernel's and which the user's is
host/trust.py's to say (`Decision.EXEMPTION`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpuallocd.host.proc import (
    CodeMapping,
    executable_mappings,
    mapped_file,
    tracer_of,
    user_namespace,
)
from gpuallocd.host.trust import Decision, loader_variables, takes_away

__all__ = ["closed_to_users", "runs_foreign_code", "trusted_program"]


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


def _root_file(path: str, device: int, inode: int) -> bool:
    """Whether `path` names the file (`device`, `inode`), a regular file of root's that only
    root may write, in directories closed to users."""
    if not path.startswith("/"):
        return False  # a file outside our mount namespace, an anonymous file
    try:
        named = os.stat(path, follow_symlinks=False)
    except OSError:
        return False  # "(deleted)" names, a memfd
    same = (named.st_dev, named.st_ino) == (device, inode)
    if not same or not stat.S_ISREG(named.st_mode) or not closed_to_users(named):
        return False
    closed, shared = _directories_closed(os.path.dirname(path))
    return closed and not (shared and named.st_nlink != 1)  # a user's hard link, in /tmp


def trusted_program(pid: int, proc: str = "/proc") -> str | None:
    """The file name of the program `pid` runs, where only root can have put it there under
    that name; None otherwise (or when the process is gone)."""
    exe = f"{proc}/{pid}/exe"
    try:
        path = os.readlink(exe)
        running = os.stat(exe)
    except OSError:
        return None
    return os.path.basename(path) if _root_file(path, running.st_dev, running.st_ino) else None


def _root_code(pid: int, mapping: CodeMapping, proc: Path) -> bool:
    """Whether a mapping holds root's code as root's file holds it: unwritten, of a file of
    root's by that name (by smaps' device, else by the file map_files resolves)."""
    if mapping.written_kib:
        return False
    if _root_file(mapping.path, mapping.device, mapping.inode):
        return True
    resolved = mapped_file(pid, mapping, proc)
    if resolved is None or resolved.st_ino != mapping.inode:
        return False
    return _root_file(mapping.path, resolved.st_dev, resolved.st_ino)


def runs_foreign_code(pid: int, proc: str = "/proc") -> bool:
    """Whether the process may run code that is not root's: a loader variable in its
    environment, a file mapped executable that is not root's (or was written to), a tracer,
    a user namespace of its own, or a look that was refused."""
    base = Path(proc)
    loader = loader_variables(Decision.EXEMPTION, pid, base)
    if loader is None or takes_away(Decision.EXEMPTION, loader):
        return True
    if tracer_of(pid, base) != 0:
        return True
    own = user_namespace("self", base)
    if own is None or user_namespace(pid, base) != own:
        return True
    mappings = executable_mappings(pid, base)
    return mappings is None or not all(_root_code(pid, m, base) for m in mappings)
