"""What this machine offers the daemon, read without side effects: its capabilities, how
/proc is mounted, which directories it may write, the init system, the cgroup hierarchy and
the clock source. The daemon checks its features' needs with it (`daemon/startup/needs.py`);
`gpuallocctl doctor` shows the same facts.

    capabilities.py   Linux capabilities by name, read from /proc/PID/status
    proc.py           what /proc says of a process: parent, start time, owner, command,
                      environment, mapped code, user namespace (every module that asks
                      /proc about a pid asks here)
    trust.py          how far each of those facts can be trusted: the kernel's, the
                      ledger's, or written by the process's user; the table of decisions
                      that give a user something, and the only readers of user-written facts
    files.py          writing a file another user may reach: a random name, O_EXCL and
                      O_NOFOLLOW, the mode on the open file, one rename
    users.py          the user database (passwd, group) through one cache for every reader,
                      read afresh when its files change
    probes.py         /proc visibility, writable directories, cgroups, systemd, clock source,
                      namespaces of its own (a container)
"""

from __future__ import annotations

from gpuallocd.host.capabilities import CAPABILITY_NAMES, Capabilities, capability_names
from gpuallocd.host.probes import (
    ProcVisibility,
    cgroup_version,
    clock_source,
    own_namespaces,
    proc_visibility,
    systemd_is_init,
    unwritable,
)

__all__ = [
    "CAPABILITY_NAMES",
    "Capabilities",
    "ProcVisibility",
    "capability_names",
    "cgroup_version",
    "clock_source",
    "own_namespaces",
    "proc_visibility",
    "systemd_is_init",
    "unwritable",
]
