"""The config checked against the machine, and what became of the last reload.

A config can be well-formed and still name a group or a user this machine does not have
(`admin_groups`, `[limits.group.X]`, `[limits.user.Y]`): it starts, and the rule silently
applies to nobody. Those are warnings, found at start and at each reload (SIGHUP), logged,
and shown by `gpuallocctl doctor` and `/v1/health` beside the config's other warnings. A
reload refused (a file that no longer reads) keeps the rules in force; it is shown the same
way until a reload succeeds.
"""

from __future__ import annotations

import grp
import pwd
from typing import Any

from gpuallocd.daemon.diagnostics import config_warnings
from gpuallocd.daemon.settings import DaemonConfig

__all__ = ["ConfigState", "machine_warnings"]


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


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


class ConfigState:
    """The warnings of the config in force, and the last reload refused since it was read."""

    def __init__(self, config: DaemonConfig) -> None:
        self.warnings: list[str] = []
        self.refused: dict[str, Any] | None = None
        self.adopt(config)

    def adopt(self, config: DaemonConfig) -> list[str]:
        """A config now in force (at start, or a reload that read): its warnings."""
        self.warnings = config_warnings(config) + machine_warnings(config)
        self.refused = None
        return self.warnings

    def refuse(self, message: str, at: float) -> None:
        """A reload that did not read: the rules in force stay, and this says why."""
        self.refused = {"message": message, "at": at}

    def report(self) -> dict[str, Any]:
        """For `/v1/health` and `/v1/diagnostics` (doctor)."""
        return {"config_warnings": list(self.warnings), "reload_refused": self.refused}
