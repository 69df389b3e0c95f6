"""The config checked against the machine, and what became of the last reload.

A config can be well-formed and still name a group or a user this machine does not have
(`admin_groups`, `[limits.group.X]`, `[limits.user.Y]`): it starts, and the rule silently
applies to nobody; or set a `power_budget_watts` below what the GPUs' default power limits
commit (read from the last power reading, once the daemon has one). Those are warnings,
found at start and at each reload (SIGHUP), logged, and shown by `gpuallocctl doctor` and
`/v1/health` beside the config's other warnings. A reload refused (a file that no longer
reads) keeps the rules in force; it is shown the same way until a reload succeeds.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuallocd.allocator.power.budget import below_defaults
from gpuallocd.api.tcp_address import is_loopback_address
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.host import users
from gpuallocd.model import PowerReading

__all__ = ["ConfigState", "config_warnings", "machine_warnings"]


def _group_exists(name: str) -> bool:
    return users.group_id(name) is not None


def _user_exists(name: str) -> bool:
    return users.account_named(name) is not None


def machine_warnings(config: DaemonConfig) -> list[str]:
    """The groups and users the config names that the user database does not know."""
    found = [
        f"admin_groups names group {name!r}, which this machine does not have: it makes "
        "nobody an admin (groupadd it, or fix the name)"
        for name in config.admin_groups
        if not _group_exists(name)
    ]
    found += [
        f"[limits.group.{name}]: this machine has no group {name!r}; the limits apply to nobody"
        for name in sorted(config.limits.groups)
        if not _group_exists(name)
    ]
    found += [
        f"[limits.user.{name}]: this machine has no user {name!r}; the limits apply to nobody"
        for name in sorted(config.limits.users)
        if not _user_exists(name)
    ]
    return found


def _no_readings() -> Mapping[str, PowerReading]:
    return {}


class ConfigState:
    """The warnings of the config in force, and the last reload refused since it was read."""

    def __init__(self, config: DaemonConfig) -> None:
        self._warnings: list[str] = []
        self._budget_watts: float | None = None
        self.refused: dict[str, Any] | None = None
        # the GPUs' last power reading (the power timer's; never a driver call here)
        self.power: Callable[[], Mapping[str, PowerReading]] = _no_readings
        self.adopt(config)

    @property
    def warnings(self) -> list[str]:
        """The config's warnings, against the machine as last read."""
        power = below_defaults(self._budget_watts, self.power())
        return self._warnings + ([power] if power else [])

    def adopt(self, config: DaemonConfig) -> list[str]:
        """A config now in force (at start, or a reload that read): its warnings."""
        self._warnings = config_warnings(config) + machine_warnings(config)
        self._budget_watts = config.power_budget_watts
        self.refused = None
        return self.warnings

    def power_warnings(self) -> list[str]:
        """The warnings only a power reading can tell (logged once the first one came)."""
        found = below_defaults(self._budget_watts, self.power())
        return [found] if found else []

    def refuse(self, message: str, at: float) -> None:
        """A reload that did not read: the rules in force stay, and this says why."""
        self.refused = {"message": message, "at": at}

    def report(self) -> dict[str, Any]:
        """For `/v1/health` and `/v1/diagnostics` (doctor)."""
        return {"config_warnings": list(self.warnings), "reload_refused": self.refused}


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
    unstopped = _draw_left_running(config)
    if unstopped:
        found.append(
            f"power_budget_watts = {config.power_budget_watts:g} while {unstopped}: processes "
            "run without a lease are only reported and keep running, and what they draw on "
            "free GPUs counts against the budget, so leases wait or are refused for it (the "
            'reason names who draws); set unleased_use = "terminate" in each place named '
            "to stop such draw (docs/accounting.md)"
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


def _draw_left_running(config: DaemonConfig) -> str | None:
    """Where a power budget is set and unleased use is only reported (or ignored): the
    site's `unleased_use` and each table of `[limits]` that says so; None where none does."""
    if config.power_budget_watts is None:
        return None
    lenient = ("off", "report")
    where = [f'unleased_use = "{config.unleased_use}"'] if config.unleased_use in lenient else []
    modes = config.unleased_modes
    for kind, table in (("group", modes.groups), ("user", modes.users)):
        where += [
            f'[limits.{kind}.{name}] unleased_use = "{mode}"'
            for name, mode in sorted(table.items())
            if mode in lenient
        ]
    return ", ".join(where) or None


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
