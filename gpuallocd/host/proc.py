"""What /proc says of a process: its parent and start time (one at a time or all at once),
its owner, its command, its environment, the files it maps executable and its user namespace.
Every module that asks /proc about a pid asks here; which of these facts a decision may rest
on is `host/trust.py`'s to say (the command and the environment are its user's to write).

A process is known by its pid *and* its start time (clock ticks since boot, field 22 of
/proc/PID/stat): the kernel may give a pid to a new process once the old one is reaped, but
never with the same start time, so the pair names one process for good.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CLOCK_TICKS",
    "ENVIRON_BYTES",
    "PROC",
    "CodeMapping",
    "ProcessTable",
    "children_of",
    "command_of",
    "descendants",
    "environ_entries",
    "environ_value",
    "executable_mappings",
    "mapped_file",
    "own_uid",
    "parse_stat",
    "pids_owned_by",
    "process_owner",
    "process_start_time",
    "read_environ",
    "read_parent",
    "read_process_table",
    "thread_group_lives",
    "tracer_of",
    "user_namespace",
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


def pids_owned_by(uid: int, proc: Path = PROC) -> list[int]:
    """The pids whose /proc entry is `uid`'s: that user's processes, as the kernel marks each
    entry (its effective uid), one stat each and no file read, so a walk for one user costs
    little per process of others. A first cut only: the entry of a process that made itself
    non-dumpable is root's (it is left out), and what a decision rests on is read again
    (`own_uid`)."""
    found = []
    with os.scandir(proc) as entries:  # a third of the time of Path.iterdir and stat
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    found.append(int(entry.name))
            except OSError:
                continue  # exited meanwhile
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
    ENVIRON_BYTES; None where it cannot be read (another user's takes CAP_SYS_PTRACE), or
    not yet: in an exec, after its new program is mapped but before the kernel has placed
    its environment, it reads empty."""
    try:
        fd = os.open(proc / str(pid) / "environ", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        found = os.read(fd, ENVIRON_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None if not found and _in_exec(pid, proc) else found


def _in_exec(pid: int, proc: Path) -> bool:
    """Whether the process's environment has no place yet (env_end, field 51 of its stat,
    is 0 until an exec has set it up)."""
    text = _read(f"{proc}/{pid}/stat")
    try:
        return text is None or int(_fields(text)[48]) == 0
    except (ValueError, IndexError):
        return True


def environ_value(environ: bytes, name: bytes) -> str | None:
    """The value of `name` in an environment read by `read_environ`; None where unset."""
    prefix = name + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def environ_entries(environ: bytes) -> list[tuple[bytes, bytes | None]]:
    """Every entry of an environment read by `read_environ`, in order, as (name, value): a
    name may be there twice, and an entry without `=` has no value."""
    found: list[tuple[bytes, bytes | None]] = []
    for entry in environ.split(b"\0"):
        if entry:
            name, equals, value = entry.partition(b"=")
            found.append((name, value if equals else None))
    return found


@dataclass(frozen=True, slots=True)
class CodeMapping:
    """A file the process maps executable, as the kernel shows it in /proc/PID/smaps: the
    address range (as /proc/PID/map_files names it), the file's device and inode, its name
    (" (deleted)" once unlinked; a memfd's is "/memfd:NAME (deleted)"), and how many KiB of
    it are anonymous: pages written since they were mapped (copied on write)."""

    span: str
    device: int
    inode: int
    path: str
    written_kib: int


_VMA = re.compile(rb"([0-9a-f]+)-([0-9a-f]+) (\S{4}) [0-9a-f]+ ([0-9a-f]+):([0-9a-f]+) (\d+) *(.*)")


def _read_all(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks)


def executable_mappings(pid: int, proc: Path = PROC) -> list[CodeMapping] | None:
    """The files process `pid` maps executable (anonymous memory, and the kernel's own
    [vdso], are no file and not listed); None where /proc/PID/smaps cannot be read (another
    user's takes CAP_SYS_PTRACE) or the process is gone."""
    text = _read_all(f"{proc}/{pid}/smaps")
    if not text:
        return None
    found: list[CodeMapping] = []
    current: CodeMapping | None = None
    for line in text.split(b"\n"):
        vma = _VMA.fullmatch(line)
        if vma is not None:
            start, end, perms, major, minor, inode, path = vma.groups()
            current = None
            if b"x" in perms and int(inode) != 0:
                span = f"{int(start, 16):x}-{int(end, 16):x}"
                device = os.makedev(int(major, 16), int(minor, 16))
                current = CodeMapping(span, device, int(inode), path.decode(errors="replace"), 0)
                found.append(current)
        elif current is not None and line.startswith(b"Anonymous:"):
            written = int(line.split()[1])
            found[-1] = current = CodeMapping(
                current.span, current.device, current.inode, current.path, written
            )
    return found


def mapped_file(pid: int, mapping: CodeMapping, proc: Path = PROC) -> os.stat_result | None:
    """The file behind `mapping` as the kernel resolves it (/proc/PID/map_files, which takes
    CAP_SYS_ADMIN): its device there is the one stat(2) gives for its name, where the device
    in smaps may be the file system's own (a btrfs subvolume); None where it cannot be read."""
    try:
        return os.stat(f"{proc}/{pid}/map_files/{mapping.span}")
    except OSError:
        return None


def user_namespace(pid: int | str, proc: Path = PROC) -> int | None:
    """The user namespace process `pid` (or "self") is in, by its inode; None when it is gone
    or cannot be read (another user's takes CAP_SYS_PTRACE)."""
    try:
        return os.stat(f"{proc}/{pid}/ns/user").st_ino
    except OSError:
        return None
