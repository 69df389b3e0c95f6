"""Linux capabilities of this process, by name, as the kernel reports them in /proc.

Under systemd the daemon runs as root with only what `CapabilityBoundingSet=` leaves it; what
it holds decides which features can act on other users' processes (`needs.py`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CAPABILITY_NAMES", "Capabilities", "capability_names"]

# The kernel's numbering (linux/capability.h), from 0.
CAPABILITY_NAMES = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
)


def capability_names(mask: int) -> frozenset[str]:
    """The names of the capabilities set in `mask` (bits the table has no name for: CAP_N)."""
    found = set()
    bit = 0
    while mask >> bit:
        if mask >> bit & 1:
            found.add(CAPABILITY_NAMES[bit] if bit < len(CAPABILITY_NAMES) else f"CAP_{bit}")
        bit += 1
    return frozenset(found)


class Capabilities:
    """The effective and bounding sets of a process, read once from its /proc status."""

    def __init__(self, effective: frozenset[str], bounding: frozenset[str]) -> None:
        self.effective = effective
        self.bounding = bounding

    @classmethod
    def of_process(cls, pid: int | str = "self", proc: Path = Path("/proc")) -> Capabilities:
        masks = {}
        for line in (proc / str(pid) / "status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("CapEff", "CapBnd"):
                masks[key] = int(value.strip(), 16)
        return cls(capability_names(masks["CapEff"]), capability_names(masks["CapBnd"]))

    def missing(self, *names: str) -> list[str]:
        return [name for name in names if name not in self.effective]
