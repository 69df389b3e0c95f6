"""The settings of enforcement (docs/enforcement.md) turned into the allocator's rules, and
what they need from the host, checked at start with the other needs (needs.py)."""

from __future__ import annotations

import os
import stat

from gpuallocd.daemon.settings import DaemonConfig
from gpuallocd.enforcement import UnleasedRules

__all__ = ["device_owners", "terminates", "unleased_rules"]


def unleased_rules(config: DaemonConfig) -> UnleasedRules:
    """The rules for GPU use without a lease, with the overrides of the `[limits]` tables."""
    limits = config.limits
    return UnleasedRules(
        mode=config.unleased_use,
        grace_seconds=config.unleased_grace_seconds,
        kill_after_seconds=config.revoke_grace_seconds,
        exempt_users=frozenset(config.unleased_exempt_users),
        exempt_commands=frozenset(config.unleased_exempt_commands),
        over_limit=config.unleased_over_limit,
        user_modes={n: v.unleased_use for n, v in limits.users.items() if v.unleased_use},
        group_modes={n: v.unleased_use for n, v in limits.groups.items() if v.unleased_use},
    )


def terminates(config: DaemonConfig) -> bool:
    """Whether any user's unleased processes may be signalled."""
    rules = unleased_rules(config)
    modes = {rules.mode, *rules.user_modes.values(), *rules.group_modes.values()}
    return "terminate" in modes or ("adopt" in modes and rules.over_limit == "terminate")


def device_owners(directory: str) -> set[int]:
    """The owners of the GPU device files in `directory` (NVIDIA's and AMD's render nodes:
    character devices only)."""
    owners = set()
    for sub in ("", "nvidia-caps", "dri"):
        try:
            with os.scandir(os.path.join(directory, sub)) as entries:
                for entry in entries:
                    info = entry.stat(follow_symlinks=False)
                    if entry.name.startswith(("nvidia", "renderD")) and stat.S_ISCHR(info.st_mode):
                        owners.add(info.st_uid)  # a link or a plain file gets no ACL
        except OSError:
            continue
    return owners
