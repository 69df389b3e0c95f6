"""What /proc and the user database say about a process found on a GPU: its program, start
time and owner, and the names it goes by (its owner's to choose: shown, never decisive,
`Decision.NAMING` in host/trust.py). Reads only; a process gone meanwhile gives None. Owners'
names and groups are the user database's of the moment (host/users.py)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path

from gpuallocd.enforcement.programs import runs_foreign_code, trusted_program
from gpuallocd.host import users
from gpuallocd.host.proc import process_owner, process_start_time
from gpuallocd.host.trust import Decision, names

__all__ = ["Owner", "ProcFacts", "owner_and_start", "owner_of", "proc_facts"]


@dataclass(frozen=True, slots=True)
class ProcFacts:
    command: str  # the kernel's name for it (/proc/PID/comm): shown only
    argv0: str  # shown only
    start_time: int | None  # clock ticks since boot
    program: str | None = None  # one of the programs asked about, where it runs root's code


@dataclass(frozen=True, slots=True)
class Owner:
    uid: int
    gid: int
    user: str
    groups: frozenset[str]


def proc_facts(
    pid: int, proc: Path = Path("/proc"), *, programs: Container[str] = frozenset()
) -> ProcFacts | None:
    """The process's facts; its `program` named where it is one of `programs` (the names an
    exemption looks for: only then is the code it runs looked at)."""
    found = names(Decision.NAMING, pid, proc)
    if found is None:
        return None
    command, argv0 = found
    return ProcFacts(
        command=str(command),
        argv0=str(argv0),
        start_time=process_start_time(pid, proc),
        program=_program(pid, str(proc), programs),
    )


def _program(pid: int, proc: str, programs: Container[str]) -> str | None:
    """The trusted program `pid` runs, where it is one of `programs` and runs root's code
    only, read on both sides of the look at its code: an exec in between (a clean look, then
    a preloaded program) names two programs, or none, and exempts nothing."""
    program = trusted_program(pid, proc)
    if program is None or program not in programs or runs_foreign_code(pid, proc):
        return None
    return program if trusted_program(pid, proc) == program else None


def owner_and_start(pid: int, proc: Path = Path("/proc")) -> tuple[int, int] | None:
    """The owner (effective uid, as the sample reads it) and start time of `pid`, read in
    one look: a pidfd opened first holds on to the process, and what /proc said is its own
    only if that process still lives once both are read (a pid handed to another process in
    between fails this). None when the process is gone, or a zombie."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    try:
        uid = process_owner(pid, proc)
        start = process_start_time(pid, proc)
        with contextlib.suppress(PermissionError):  # it lives (signalling it is not ours)
            signal.pidfd_send_signal(fd, 0)
    except (OSError, ValueError, IndexError):
        return None
    finally:
        os.close(fd)
    return None if uid is None or start is None else (uid, start)


def owner_of(uid: int | None) -> Owner | None:
    """The user `uid` and their groups from the user database (a uid without an entry keeps
    its number as its name)."""
    if uid is None:
        return None
    entry = users.account(uid)
    if entry is None:
        return Owner(uid, uid, str(uid), frozenset())
    return Owner(uid, entry.gid, entry.name, users.groups_of(entry.name, entry.gid))
