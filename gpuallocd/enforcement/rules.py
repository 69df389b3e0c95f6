"""The site's rules for GPU use without a lease: the mode, its grace, and who is exempt.

`unleased_use` sets the mode for everyone; `[limits.group.NAME]` and `[limits.user.NAME]`
may set `unleased_use` for some (the user's own entry wins, else the most lenient of the
user's groups that set it, else the site's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["DEFAULT_EXEMPT_COMMANDS", "MODES", "OVER_LIMIT", "UnleasedModes", "UnleasedRules"]

MODES = ("off", "report", "terminate", "adopt")
LENIENCE = ("off", "adopt", "report", "terminate")  # most lenient first
OVER_LIMIT = ("report", "terminate")
DEFAULT_EXEMPT_COMMANDS = (
    "Xorg",
    "Xwayland",
    "gnome-shell",
    "nvidia-persistenced",
    "nv-hostengine",
    "dcgm",
    "dcgm-exporter",
)


@dataclass(frozen=True)
class UnleasedModes:
    """`unleased_use` where a group's or a user's table in `[limits]` sets it: enforcement's
    own, kept apart from the limits the allocator enforces."""

    users: Mapping[str, str] = field(default_factory=dict)
    groups: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class UnleasedRules:
    """How the daemon treats a process that uses a GPU (or MIG instance) its user holds no
    lease on."""

    mode: str = "report"
    grace_seconds: float = 60.0
    kill_after_seconds: float = 10.0
    exempt_users: frozenset[str] = frozenset()
    exempt_commands: frozenset[str] = frozenset(DEFAULT_EXEMPT_COMMANDS)
    over_limit: str = "report"
    user_modes: Mapping[str, str] = field(default_factory=dict)
    group_modes: Mapping[str, str] = field(default_factory=dict)

    def mode_for(self, user: str, groups: Iterable[str]) -> str:
        """The mode that applies to `user`, a member of `groups`."""
        own = self.user_modes.get(user)
        if own is not None:
            return own
        set_by_groups = [self.group_modes[g] for g in groups if g in self.group_modes]
        if set_by_groups:
            return min(set_by_groups, key=LENIENCE.index)
        return self.mode

    def exempt(self, user: str, program: str | None) -> bool:
        """A process of an exempt user, or one running an exempt command: its program's file
        name where only root can have given it (`programs.py`), never a name the process's
        owner chose (its name in the kernel, its argv[0], a copy or a link of their own)."""
        if user in self.exempt_users:
            return True
        return program is not None and program in self.exempt_commands

    @property
    def active(self) -> bool:
        """Whether anything is looked at: not when the site and every override say off."""
        overrides = [*self.user_modes.values(), *self.group_modes.values()]
        return any(mode != "off" for mode in (self.mode, *overrides))
