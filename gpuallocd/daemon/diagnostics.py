"""What the running daemon tells `gpuallocctl doctor`: who it runs as and with which
capabilities, what its features need and whether they have it, how it tracks processes, the
host it sees (init system, cgroups, clock), and the config's warnings."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from gpuallocd import __version__
from gpuallocd.daemon.config.machine_checks import config_warnings
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.sdnotify import watchdog_interval
from gpuallocd.daemon.startup.needs import Need
from gpuallocd.host import Capabilities, cgroup_version, clock_source, systemd_is_init

__all__ = ["diagnostics"]


def _tracking(stats: dict[str, Any]) -> dict[str, Any]:
    """`process_tracking` is the mode (doctor reads it); the rest beside it."""
    return {"process_tracking": stats["mode"], "process_tracking_detail": stats}


def diagnostics(
    config: DaemonConfig,
    needs: Sequence[Need],
    process_tracking: Callable[[], dict[str, Any]],
    started_at: float,
    ports: Callable[[], list[dict[str, Any]]] = list,
) -> dict[str, Any]:
    """The daemon's side of `gpuallocctl doctor`, read fresh at each call; `ports` gives the
    TCP ports' states (served, or why not)."""
    capabilities = Capabilities.of_process()
    watchdog = watchdog_interval(os.environ, os.getpid())
    return {
        "version": __version__,
        "pid": os.getpid(),
        "uid": os.geteuid(),
        "started_at": started_at,
        "capabilities": {
            "effective": sorted(capabilities.effective),
            "bounding": sorted(capabilities.bounding),
        },
        "needs": [need.to_json() for need in needs],
        **_tracking(process_tracking()),
        "inventory": config.inventory,
        "socket": config.socket,
        "systemd": {
            "init": systemd_is_init(),
            "notify": "NOTIFY_SOCKET" in os.environ,
            "watchdog_ping_seconds": watchdog,
        },
        "cgroup": cgroup_version(),
        "clock": {"source": clock_source(), "expiry": "CLOCK_BOOTTIME"},
        "config_warnings": config_warnings(config),
        "ports": ports(),
    }
