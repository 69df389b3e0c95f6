"""The config turned into every domain value the daemon's parts take, in one place.

Each part below the daemon takes plain values of its own (`AllocatorSettings`, `SiteRules`,
`IdleRules`, `UnleasedRules`) and never reads the config; this module is where a setting
becomes one of them, at start and again on a reload.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from gpuallocd.allocator import AllocatorSettings, IdleRules, SiteRules
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.enforcement import UnleasedRules
from gpuallocd.model.energy import EnergyPrice

__all__ = [
    "allocator_settings",
    "energy_price",
    "idle_rules",
    "site_rules",
    "terminates",
    "unleased_rules",
]


def allocator_settings(config: DaemonConfig) -> AllocatorSettings:
    """The settings that decide a grant: each field of AllocatorSettings is the setting of
    the same name (the settings table declares it once), but for the one read off a choice."""
    derived: dict[str, Any] = {"fair_share_counts_unleased": config.fair_share_unleased == "count"}
    names = [f.name for f in fields(AllocatorSettings) if f.name not in derived]
    return AllocatorSettings(**{name: getattr(config, name) for name in names}, **derived)


def site_rules(config: DaemonConfig) -> SiteRules:
    """The limits and admin groups of a config."""
    return SiteRules(limits=config.limits, admin_groups=frozenset(config.admin_groups))


def idle_rules(config: DaemonConfig) -> IdleRules:
    """Idle reclaim: off without `idle_reclaim_minutes`; times in seconds."""
    minutes = config.idle_reclaim_minutes
    return IdleRules(
        reclaim_seconds=None if minutes is None else minutes * 60.0,
        grace_seconds=config.idle_grace_minutes * 60.0,
    )


def unleased_rules(config: DaemonConfig) -> UnleasedRules:
    """The rules for GPU use without a lease, with the overrides of the `[limits]` tables."""
    return UnleasedRules(
        mode=config.unleased_use,
        grace_seconds=config.unleased_grace_seconds,
        kill_after_seconds=config.revoke_grace_seconds,
        exempt_users=frozenset(config.unleased_exempt_users),
        exempt_commands=frozenset(config.unleased_exempt_commands),
        over_limit=config.unleased_over_limit,
        user_modes=config.unleased_modes.users,
        group_modes=config.unleased_modes.groups,
    )


def energy_price(config: DaemonConfig) -> EnergyPrice | None:
    """The site's price of a kWh, or None where it set none."""
    per_kwh = config.energy_price_per_kwh
    return None if per_kwh is None else EnergyPrice(per_kwh, config.energy_currency)


def terminates(config: DaemonConfig) -> bool:
    """Whether any user's unleased processes may be signalled."""
    rules = unleased_rules(config)
    modes = {rules.mode, *rules.user_modes.values(), *rules.group_modes.values()}
    return "terminate" in modes or ("adopt" in modes and rules.over_limit == "terminate")
