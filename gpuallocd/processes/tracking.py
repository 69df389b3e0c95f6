"""Which way the daemon follows the processes of bound leases, chosen once at start.

`scope`: each bound lease's processes are a cgroup, a transient systemd scope (`scopes.py`);
it needs root, systemd as PID 1 on the unified cgroup hierarchy and its bus answering, and
works in a container too. The kernel keeps the membership: a fork lands in its parent's
cgroup whatever happens next, and no user can move a process out of a cgroup of root's, so
neither a fork storm, a `clone(CLONE_PARENT)` nor a restart of the daemon loses work.
`connector`: the kernel's process events (`connector.py`), a fork covered when it happens;
it needs root with CAP_NET_ADMIN in the initial user and pid namespaces, and it loses the
ancestry of work whose events the kernel dropped (an overrun) or that outlived its parents
while the daemon was down. `proc-scan`: /proc read once a second and at each renewal,
which misses a process whose parents up to a member all exit between two scans. The
setting `process_tracking` picks: `auto` (the default) a scope wherever systemd offers one
(the shipped unit's case), else the connector where the kernel grants it, else the scan
with one warning; `connector` and `scope` refuse to start without what they need (exit
77); `proc-scan` never asks. docs/architecture.md ("How a process is tied to a lease")
gives the grant latency of each, which the order follows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from gpuallocd.errors import MissingPrivilege
from gpuallocd.host import cgroup_version, systemd_is_init
from gpuallocd.processes.connector import Connector, ConnectorUnavailable
from gpuallocd.processes.systemd_bus import bus_problem

__all__ = ["CONNECTOR", "PROC_SCAN", "SCOPE", "SETTINGS", "Tracking", "choose_tracking"]

log = logging.getLogger("gpuallocd")

CONNECTOR = "connector"
SCOPE = "scope"
PROC_SCAN = "proc-scan"
SETTINGS = ("auto", CONNECTOR, SCOPE, PROC_SCAN)
SCOPE_REASON = "a systemd scope (cgroup) per bound lease"


@dataclass(frozen=True)
class Tracking:
    """The mode in force, its connector where it has one, and why this mode."""

    mode: str
    connector: Connector | None = None
    reason: str = ""


def scope_problem() -> str | None:
    """Why leases cannot be systemd scopes here; None if they can."""
    if os.geteuid() != 0:
        return "the daemon is not root (systemd makes system scopes for root only)"
    if not systemd_is_init():
        return "systemd is not PID 1"
    if cgroup_version() != "v2":
        return f"cgroups are {cgroup_version()}, not the unified hierarchy (v2)"
    return bus_problem()


def _scope(problem: str | None) -> Tracking:
    if problem is not None:
        raise MissingPrivilege(
            f'process_tracking = "scope": {problem}; run the daemon under systemd on cgroup '
            'v2 as root, or set process_tracking = "auto"'
        )
    return Tracking(SCOPE, None, SCOPE_REASON)


def choose_tracking(
    setting: str,
    open_connector: Callable[[], Connector] = Connector.open,
    scope_problem: Callable[[], str | None] = scope_problem,
) -> Tracking:
    """The mode `setting` asks for and this host allows; MissingPrivilege where `connector`
    or `scope` is demanded and cannot be had."""
    if setting == PROC_SCAN:
        return Tracking(PROC_SCAN, None, 'process_tracking = "proc-scan"')
    if setting == SCOPE:
        return _scope(scope_problem())
    problem = scope_problem() if setting == "auto" else None
    if setting == "auto" and problem is None:
        return Tracking(SCOPE, None, SCOPE_REASON)
    try:
        connector = open_connector()
    except ConnectorUnavailable as exc:
        reason = f"the kernel's process events are unavailable: {exc}"
        if setting == CONNECTOR:
            raise MissingPrivilege(
                f'process_tracking = "connector": {reason}; run the daemon as root with '
                "CAP_NET_ADMIN in the initial namespaces (as gpuallocd.service does), or "
                'set process_tracking = "auto"'
            ) from None
        log.warning(
            "process tracking falls back to scanning /proc once a second (%s; no scope: %s): "
            "work whose parents all exit between two scans can escape its lease",
            reason,
            problem,
        )
        return Tracking(PROC_SCAN, None, f"{reason}; no scope: {problem}")
    reason = "the kernel's process events (netlink connector)"
    if problem is not None:
        reason += f"; no scope: {problem}"
    return Tracking(CONNECTOR, connector, reason)
