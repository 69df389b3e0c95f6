"""Which way the daemon follows the processes of bound leases, chosen once at start.

`connector`: the kernel's process events (`connector.py`), a fork covered when it happens;
it needs root with CAP_NET_ADMIN in the initial user and pid namespaces. `proc-scan`: /proc
read once a second and at each renewal, which misses a process whose parents up to a member
all exit between two scans. The setting `process_tracking` picks: `auto` (the default) the
connector where the kernel grants it, else the scan with one warning; `connector` refuses to
start without it (exit 77); `proc-scan` never asks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from gpuallocd.errors import MissingPrivilege
from gpuallocd.processes.connector import Connector, ConnectorUnavailable

__all__ = ["CONNECTOR", "PROC_SCAN", "SETTINGS", "Tracking", "choose_tracking"]

log = logging.getLogger("gpuallocd")

CONNECTOR = "connector"
PROC_SCAN = "proc-scan"
SETTINGS = ("auto", CONNECTOR, PROC_SCAN)


@dataclass(frozen=True)
class Tracking:
    """The mode in force, its connector where it has one, and why this mode."""

    mode: str
    connector: Connector | None = None
    reason: str = ""


def choose_tracking(
    setting: str, open_connector: Callable[[], Connector] = Connector.open
) -> Tracking:
    """The mode `setting` asks for and this host allows; MissingPrivilege where `connector`
    is demanded and cannot be had."""
    if setting == PROC_SCAN:
        return Tracking(PROC_SCAN, None, 'process_tracking = "proc-scan"')
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
            "process tracking falls back to scanning /proc once a second (%s): work whose "
            "parents all exit between two scans can escape its lease",
            reason,
        )
        return Tracking(PROC_SCAN, None, reason)
    return Tracking(CONNECTOR, connector, "the kernel's process events (netlink connector)")
