"""What /proc says of a process: its parent and start time (one at a time or all at once),
its owner, its command and its environment. Every module that asks /proc about a pid asks
here.

A process is known by its pid *and* its start time (clock ticks since boot, field 22 of
/proc/PID/stat): the kernel may give a pid to a new process once the old one is reaped, but
never with the same start time, so the pair names one process for good.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "CLOCK_TICKS",
    "ENVIRON_BYTES",
    "PROC",
    "ProcessTable",
    "children_of",
    "command_of",
    "descendants",
    "environ_value",
    "own_uid",
    "parse_stat",
    "process_owner",
    "process_start_time",
    "read_environ",
    "read_parent",
    "read_process_table",
    "thread_group_lives",
    "tracer_of",
]

ProcessTable = dict[int, tuple[int, int]]  # pid -> (parent pid, start time)
PROC = Path("/proc")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
STAT_BYTES = 4096  # a stat line is at most about 700 bytes
ENVIRON_BYTES = 1 << 20  # an environment is at most a few hundred KiB (ARG_MAX)


def _fields(text: str) -> list[str]:
    # Fields after the command name, which may itself hold spaces and parentheses.
    return text[text.rindex(")") + 2 :].split()


def parse_stat(text: str, *, group_lives: bool = False) -> tuple[int, int] | None:
    """(parent pid, start time) of a /proc/PID/stat line; None for a zombie (it has exited),
    unless `group_lives`: a leader whose own thread exited while its others still run."""
    fields = _fields(text)
    if not fields or (fields[0] in ("Z", "X") and not group_lives):
        return None
    return int(fields[1]), int(fields[19])  # ppid (field 4), starttime (field 22)


def _read(path: str) -> str | None:
    # os.open and os.read: a quarter of the time of Path.read_text, on every covered fork.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # gone while we looked
    try:
        return os.read(fd, STAT_BYTES).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def thread_group_lives(pid: int, proc: Path = PROC, *, exited: Iterable[int] = ()) -> bool:
    """Whether a thread of process `pid` other than those `exited` still runs (a process whose
    main thread has exited lives on in its other threads; its leader shows as a zombie)."""
    gone = {pid, *exited}
    try:
        tids = [int(name) for name in os.listdir(f"{proc}/{pid}/task") if name.isdigit()]
    except OSError:
        return False
    for tid in tids:
        text = _read(f"{proc}/{pid}/task/{tid}/stat") if tid not in gone else None
        fields = _fields(text) if text and ")" in text else []
        if fields and fields[0] not in ("Z", "X"):
            return True
    return False


def _stat_of(pid: int, proc: Path) -> tuple[int, int] | None:
    text = _read(f"{proc}/{pid}/stat")
    if text is None:
        return None
    try:
        found = parse_stat(text)
        if found is None and _fields(text)[0] == "Z" and thread_group_lives(pid, proc):
            found = parse_stat(text, group_lives=True)
        return found
    except (ValueError, IndexError):
        return None


def process_start_time(pid: int, proc: Path = PROC) -> int | None:
    """When process `pid` started, in clock ticks since boot; None if it is gone or a zombie
    (a leader whose own thread exited counts as living while another of its threads runs)."""
    found = _stat_of(pid, proc)
    return None if found is None else found[1]


def read_parent(pid: int, proc: Path = PROC) -> int | None:
    """The parent of process `pid`; None if it is gone."""
    found = _stat_of(pid, proc)
    return None if found is None else found[0]


def read_process_table(proc: Path = PROC) -> ProcessTable:
    """Every living process: its parent and its start time, read from /proc."""
    table: ProcessTable = {}
    for entry in proc.iterdir():
        if entry.name.isdigit() and (found := _stat_of(int(entry.name), proc)) is not None:
            table[int(entry.name)] = found
    return table


def children_of(pid: int, proc: Path = PROC) -> list[int]:
    """The living children of `pid`, of all its threads (/proc/PID/task/TID/children; empty
    where the kernel lacks that file)."""
    found: list[int] = []
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int, proc: Path = PROC) -> list[tuple[int, int]]:
    """The processes started under `pid` that run now, each with its start time."""
    found: list[tuple[int, int]] = []
    pending = children_of(pid, proc)
    while pending:
        child = pending.pop()
        start = process_start_time(child, proc)
        if start is not None:
            found.append((child, start))
            pending += children_of(child, proc)
    return found


def process_owner(pid: int, proc: Path = PROC) -> int | None:
    """The process's owner: its effective uid in /proc/PID/status; None when it is gone or
    hidden. Never the owner of /proc/PID itself, which the kernel gives to root for any
    process that made itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, a user's to do).

    Inside a PID namespace (a container) the GPU driver's pids may not be visible here; the
    owner is then unknown."""
    try:
        lines = (proc / str(pid) / "status").read_text().splitlines()
    except (OSError, ValueError):
        return None
    for line in lines:
        if line.startswith("Uid:"):
            return int(line.split()[2])  # real, effective, saved, file system
    return None


def own_uid(pid: int, proc: Path = PROC) -> int | None:
    """The uid whose own process this is: where its real, effective and saved uids are one;
    None where they differ (a set-user-ID program runs with its file owner's rights for
    whoever started it: neither's own), or when it is gone."""
    try:
        lines = (proc / str(pid) / "status").read_text().splitlines()
    except (OSError, ValueError):
        return None
    for line in lines:
        if line.startswith("Uid:"):
            real, effective, saved = line.split()[1:4]
            return int(real) if real == effective == saved else None
    return None


def tracer_of(pid: int, proc: Path = PROC) -> int | None:
    """The pid tracing the process (0: none); None when it is gone."""
    try:
        lines = (proc / str(pid) / "status").read_text().splitlines()
    except (OSError, ValueError):
        return None
    for line in lines:
        if line.startswith("TracerPid:"):
            return int(line.split()[1])
    return None


def command_of(pid: int, proc: Path = PROC) -> tuple[str, str] | None:
    """The kernel's name of the process (comm) and its argv[0]; None when it is gone."""
    base = proc / str(pid)
    try:
        command = (base / "comm").read_text().strip()
        argv = (base / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return command, argv[0].decode(errors="replace") if argv else ""


def read_environ(pid: int, proc: Path = PROC) -> bytes | None:
    """The environment the process started with (NUL-separated `NAME=value`), its first
    ENVIRON_BYTES; None where it cannot be read (another user's takes CAP_SYS_PTRACE)."""
    try:
        fd = os.open(proc / str(pid) / "environ", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, ENVIRON_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


def environ_value(environ: bytes, name: bytes) -> str | None:
    """The value of `name` in an environment read by `read_environ`; None where unset."""
    prefix = name + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None
