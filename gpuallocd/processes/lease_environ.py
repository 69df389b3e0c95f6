"""Living processes that carry a lease id in their environment, read from /proc.

`gpu_lease` and `gpuallocctl run` export `GPUALLOCD_LEASE_ID` and `CUDA_VISIBLE_DEVICES`
(the lease's unit UUIDs, or GPU indices) to the job and its children. After the ledger is
lost, a recovery reads them, and believes them only to choose among the leases its records
know, for the same user (daemon/ledger_care/machine.py): /proc/PID/environ is the process's
own memory, which it may rewrite after it started, and may give a name twice (a process
that does carries nothing here). The uid is the kernel's. Reading another user's
environment needs root (or CAP_SYS_PTRACE); an unreadable one is skipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from gpulease.lease_id import LEASE_ID, LEASE_ID_VARIABLE

from gpuallocd.host.proc import (
    CLOCK_TICKS,
    PROC,
    process_owner,
    process_start_time,
    read_environ,
)

__all__ = ["LeaseCarrier", "lease_carriers"]

_LEASE = LEASE_ID_VARIABLE.encode() + b"="
_VISIBLE = b"CUDA_VISIBLE_DEVICES="


@dataclass(frozen=True, slots=True)
class LeaseCarrier:
    """One process carrying a lease id: its pid, start time (clock ticks since boot, and
    wall-clock seconds), uid, the id, and the devices its environment names (UUIDs or
    indices, as given)."""

    pid: int
    start_time: int
    uid: int
    lease_id: str
    devices: tuple[str, ...]
    started_at: float


def _boot_time(proc: Path) -> float:
    """When the machine booted, in wall-clock seconds (now less the uptime)."""
    try:
        uptime = float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return time.time() - uptime


def _only(entries: list[bytes], name: bytes) -> str | None:
    """The value of `name` where the environment gives it exactly once; None where it does
    not, or gives it twice (getenv takes the first, a loader or a shell the last)."""
    found = [e[len(name) :] for e in entries if e.startswith(name)]
    return found[0].decode(errors="replace") if len(found) == 1 else None


def _carrier(pid: int, proc: Path, booted: float) -> LeaseCarrier | None:
    environ = read_environ(pid, proc)
    if environ is None or _LEASE not in environ:
        return None
    entries = environ.split(b"\0")
    lease_id = _only(entries, _LEASE)
    devices = _only(entries, _VISIBLE) or ""
    start = process_start_time(pid, proc)
    if lease_id is None or not LEASE_ID.fullmatch(lease_id) or start is None:
        return None
    uid = process_owner(pid, proc)
    if uid is None:
        return None
    named = tuple(d.strip() for d in devices.split(",") if d.strip())
    return LeaseCarrier(pid, start, uid, lease_id, named, booted + start / CLOCK_TICKS)


def lease_carriers(proc: Path = PROC) -> list[LeaseCarrier]:
    """Every living process whose environment names a lease, by pid."""
    found = []
    booted = _boot_time(proc)
    for entry in sorted(proc.iterdir(), key=lambda p: (len(p.name), p.name)):
        if entry.name.isdigit() and (carrier := _carrier(int(entry.name), proc, booted)):
            found.append(carrier)
    return found
