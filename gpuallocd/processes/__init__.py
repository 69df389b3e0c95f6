"""Processes tied to leases: who holds a bound lease, which processes it covers, how they
are stopped. Below the allocator, which asks it; it decides nothing about leases.

    connector.py        the kernel's process events (netlink connector): subscribe, parse
    events.py           FamilyEvents: families kept current by those events, on the loop
    families.py         ProcessFamilies: each bound lease's processes (pid + start time)
    cgroups.py          a lease's scope in the cgroup v2 tree: names, paths, its files
    systemd_bus.py      systemd's manager over D-Bus (jeepney): start a scope, signal a unit
    inotify.py          inotify(7) through libc: a cgroup's `cgroup.events` changing
    scopes.py           LeaseScopes: each bound lease a transient systemd scope (a cgroup)
    tracking.py         the mode in force: `connector`, `scope` or `proc-scan` (setting
                        process_tracking)
    watcher.py          ProcessWatcher: leases that end with their holder (pidfd, /proc fallback)
    lease_processes.py  LeaseProcesses: holders, families, and a revoke's termination together
    signals.py          signals through a pidfd checked against the recorded start time
    terminate.py        SIGTERM, then SIGKILL after the grace, for a revoked lease's processes

docs/architecture.md ("How a process is tied to a lease") tells the whole story.
"""

from __future__ import annotations

from gpuallocd.host.proc import process_start_time
from gpuallocd.processes.families import Member, ProcessFamilies
from gpuallocd.processes.lease_processes import LeaseProcesses
from gpuallocd.processes.signals import send_signal, signal_checked
from gpuallocd.processes.tracking import SETTINGS, Tracking, choose_tracking

__all__ = [
    "SETTINGS",
    "LeaseProcesses",
    "Member",
    "ProcessFamilies",
    "Tracking",
    "choose_tracking",
    "process_start_time",
    "send_signal",
    "signal_checked",
]
