"""Why a user may not connect to the daemon's socket, and what to ask for.

A permission error on connect means the socket is there (a daemon or the socket unit serves
it) and its mode and group keep the caller out. The message names the socket's group and
the admin's command to join it, and tells a user already listed in the group that this
login predates it; it never suggests starting a daemon.
"""

from __future__ import annotations

import grp
import os
import pwd

__all__ = ["permission_denied_message"]


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _listed_in(group: str, gid: int) -> bool:
    """Whether /etc/group (or NSS) lists the caller in the group, logged in or not."""
    try:
        me = pwd.getpwuid(os.getuid())
        return me.pw_gid == gid or me.pw_name in grp.getgrgid(gid).gr_mem
    except KeyError:
        return False


def permission_denied_message(path: str) -> str:
    """The one-line error for EACCES/EPERM on connecting to `path`."""
    head = f"permission denied on {path}"
    try:
        info = os.stat(path)
    except OSError:
        parent = os.path.dirname(path) or "."
        return f"{head}: its directory {parent} is closed to you (ask an admin)"
    group = _group_name(info.st_gid)
    if not info.st_mode & 0o020:
        mode = f"{info.st_mode & 0o777:o}"
        return f"{head}: the socket is open to its owner only (mode {mode}); ask an admin"
    if _listed_in(group, info.st_gid) and info.st_gid not in os.getgroups():
        return (
            f"{head}: the daemon runs and you were added to group {group} after this login "
            f"began; log in again (or run `newgrp {group}`)"
        )
    return (
        f"{head}: the daemon runs; you need to be in group {group} "
        f"(ask an admin: sudo usermod -aG {group} $USER, then log in again)"
    )
