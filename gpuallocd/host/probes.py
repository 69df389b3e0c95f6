"""What this host allows the daemon, probed without side effects: /proc visibility, writable
directories, the init system and cgroup version, the clock source. Used by the start-up
check of the features' needs (`needs.py`) and by the diagnostics `gpuallocctl doctor` shows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ProcVisibility",
    "cgroup_version",
    "clock_source",
    "own_namespaces",
    "proc_visibility",
    "systemd_is_init",
    "unwritable",
]

_HIDING = {"1", "2", "invisible", "noaccess", "ptraceable"}
# The inode numbers of the initial user and pid namespaces, fixed in the kernel
# (PROC_USER_INIT_INO, PROC_PID_INIT_INO in include/linux/proc_ns.h).
INITIAL_NAMESPACES = {"user": 0xEFFFFFFD, "pid": 0xEFFFFFFC}
CGROUP2_SUPER_MAGIC = "cgroup2fs"


@dataclass(frozen=True)
class ProcVisibility:
    """How /proc is mounted: `hidepid` hides other users' processes unless the viewer has
    CAP_SYS_PTRACE or is in the group `gid`."""

    hidepid: str | None = None
    gid: int | None = None

    @property
    def hides_others(self) -> bool:
        return self.hidepid in _HIDING


def proc_visibility(mountinfo: Path = Path("/proc/self/mountinfo")) -> ProcVisibility:
    """The options of the /proc mount this process sees."""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return ProcVisibility()
    for line in lines:
        fields = line.split()
        if len(fields) < 5 or fields[4] != "/proc" or " - proc " not in line:
            continue
        options = dict(option.partition("=")[::2] for option in line.rsplit(" ", 1)[-1].split(","))
        gid = options.get("gid")
        return ProcVisibility(options.get("hidepid"), int(gid) if gid else None)
    return ProcVisibility()


def own_namespaces(ns: Path = Path("/proc/self/ns")) -> list[str]:
    """The user and pid namespaces this process is in that are not the machine's initial
    ones (a container): empty on a host, or where it cannot be told."""
    found = []
    for name, inode in INITIAL_NAMESPACES.items():
        try:
            if (ns / name).stat().st_ino != inode:
                found.append(name)
        except OSError:
            continue
    return found


def unwritable(directory: Path) -> str | None:
    """Why files cannot be created in `directory`; None if they can."""
    if not directory.is_dir():
        return f"{directory} does not exist"
    try:
        if not os.access(directory, os.W_OK | os.X_OK):
            return f"{directory} is not writable (a read-only mount, or its permissions)"
    except OSError as exc:
        return f"{directory}: {exc.strerror}"
    return None


def cgroup_version(root: Path = Path("/sys/fs/cgroup")) -> str:
    """`v2` (unified), `hybrid` (v1 with a v2 tree beside it), `v1`, or `none`."""
    if (root / "cgroup.controllers").exists():
        return "v2"
    if (root / "unified" / "cgroup.controllers").exists():
        return "hybrid"
    return "v1" if root.is_dir() and any(root.iterdir()) else "none"


def systemd_is_init() -> bool:
    """Whether systemd is PID 1 (sd_booted(3): /run/systemd/system exists)."""
    return Path("/run/systemd/system").is_dir()


def clock_source(
    path: Path = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
) -> str | None:
    """The kernel's clock source (tsc, kvm-clock, hpet, ...); None where it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None
