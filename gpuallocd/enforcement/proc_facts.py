"""What /proc and the user database say about a process found on a GPU: its program, start
time and owner. Reads only; a process gone meanwhile gives None."""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from gpuallocd.processes.proc import process_start_time

__all__ = ["Owner", "ProcFacts", "owner_of", "proc_facts"]


@dataclass(frozen=True, slots=True)
class ProcFacts:
    command: str  # the kernel's name for it (/proc/PID/comm)
    argv0: str
    start_time: int | None  # clock ticks since boot


@dataclass(frozen=True, slots=True)
class Owner:
    uid: int
    gid: int
    user: str
    groups: frozenset[str]


def proc_facts(pid: int, proc: Path = Path("/proc")) -> ProcFacts | None:
    base = proc / str(pid)
    try:
        command = (base / "comm").read_text().strip()
        argv = (base / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    argv0 = argv[0].decode(errors="replace") if argv else ""
    return ProcFacts(command=command, argv0=argv0, start_time=process_start_time(pid, proc))


def owner_of(uid: int | None) -> Owner | None:
    """The user `uid` and their groups from the user database (a uid without an entry keeps
    its number as its name)."""
    if uid is None:
        return None
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return Owner(uid, uid, str(uid), frozenset())
    groups: set[str] = set()
    for gid in os.getgrouplist(entry.pw_name, entry.pw_gid):
        try:
            groups.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return Owner(uid, entry.pw_gid, entry.pw_name, frozenset(groups))
