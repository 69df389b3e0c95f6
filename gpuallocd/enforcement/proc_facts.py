"""What /proc and the user database say about a process found on a GPU: its program, start
time and owner, and the names it goes by (its owner's to choose: shown, never decisive,
`Decision.NAMING` in host/trust.py). Reads only; a process gone meanwhile gives None. Owners
are cached until the user database changes (an edit of /etc/passwd or /etc/group, as the
API's identities are) or a reload."""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import signal
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path

from gpuallocd.enforcement.programs import runs_foreign_code, trusted_program
from gpuallocd.host.proc import process_owner, process_start_time
from gpuallocd.host.trust import Decision, names

__all__ = ["Owner", "OwnerCache", "ProcFacts", "owner_and_start", "owner_of", "proc_facts"]

USER_DATABASE_FILES = ("/etc/passwd", "/etc/group")


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


def _stamp(files: tuple[str, ...]) -> tuple[int | None, ...]:
    found: list[int | None] = []
    for path in files:
        try:
            found.append(os.stat(path).st_mtime_ns)
        except OSError:
            found.append(None)
    return tuple(found)


class OwnerCache:
    """`owner_of`, remembered per uid while the user database stays as it was: a user taken
    out of a group loses what the group's rules gave at the next sample, not the next reload."""

    def __init__(self, files: tuple[str, ...] = USER_DATABASE_FILES) -> None:
        self._files = files
        self._stamp = _stamp(files)
        self._owners: dict[int, Owner | None] = {}

    def get(self, uid: int | None) -> Owner | None:
        if uid is None:
            return None
        stamp = _stamp(self._files)
        if stamp != self._stamp:
            self._stamp, self._owners = stamp, {}
        if uid not in self._owners:
            self._owners[uid] = owner_of(uid)
        return self._owners[uid]

    def clear(self) -> None:
        self._owners.clear()
