"""What the running daemon tells `gpuallocctl doctor`: who it runs as and with which
capabilities, what its features need and whether they have it, how it tracks processes, the
host it sees (init system, cgroups, clock), and the config's warnings."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpuallocd import __version__
from gpuallocd.api.tcp_address import is_loopback_address
from gpuallocd.daemon.needs import Need
from gpuallocd.daemon.sdnotify import watchdog_interval
from gpuallocd.daemon.settings import DaemonConfig
from gpuallocd.host import Capabilities, cgroup_version, clock_source, systemd_is_init

__all__ = ["config_warnings", "diagnostics"]


def config_warnings(config: DaemonConfig) -> list[str]:
    """Settings that are allowed but probably not what the admin meant."""
    found = []
    if config.socket_group is not None and config.socket_mode & 0o006:
        found.append(
            f"socket_group = {config.socket_group!r} limits nothing: socket_mode = "
            f"{config.socket_mode:#o} lets every user connect (use 0o660)"
        )
    if config.metrics_listen is not None and not is_loopback_address(config.metrics_listen):
        found.append(
            f"metrics_listen = {config.metrics_listen!r}: the unit's IPAddressAllow=localhost "
            "drops scrapes from other hosts; name the scraper in IPAddressAllow= (a drop-in)"
        )
    if config.dashboard_listen is not None and not is_loopback_address(config.dashboard_listen):
        found.append(
            f"dashboard_listen = {config.dashboard_listen!r} shows every lease to that network "
            "and has no login: prefer 127.0.0.1 behind an SSH tunnel or a reverse proxy with "
            "authentication (docs/dashboard.md); the unit's IPAddressAllow=localhost drops "
            "other hosts unless a drop-in names them"
        )
    if config.idle_reclaim_minutes is None and config.idle_grace_minutes != 10.0:
        found.append("idle_grace_minutes is set but idle reclaim is off (idle_reclaim_minutes)")
    for key, path in (
        ("metrics_textfile", config.metrics_textfile),
        ("cdi_spec_path", config.cdi_spec_path),
    ):
        problem = _shared_directory(path)
        if problem is not None:
            found.append(
                f"{key} = {path!r}: its directory {problem}; the daemon never writes through a "
                "link there, but others can replace what it writes: give it a directory only "
                "root may write"
            )
    return found


def _shared_directory(path: str | None) -> str | None:
    """Why another user could change the directory of `path`, or None."""
    if path is None:
        return None
    try:
        found = os.stat(Path(path).parent)
    except OSError:
        return None  # a missing directory is the start-up check's (needs.py)
    if found.st_uid not in (0, os.geteuid()):
        return f"belongs to uid {found.st_uid}"
    if found.st_mode & 0o022 and not found.st_mode & stat.S_ISVTX:
        return f"may be written by others (mode {stat.S_IMODE(found.st_mode):#o})"
    return None


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
