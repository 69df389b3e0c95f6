"""The `[limits]` table of the config file, read into a LimitsTable, strictly.

    [limits]                     defaults for everyone
    max_gpus = 4
    [limits.group.students]      a group's override (the most generous group wins)
    max_gpus = 2
    [limits.user.alice]          a user's override (wins over every group)
    max_gpus = 8

Every key and type is checked: a typo or a wrong type is a ConfigError naming the table and
the key, so a limit never silently fails to apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuallocd.allocator import Limits, LimitsTable
from gpuallocd.allocator.site.limits import LIMIT_SPECS
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.enforcement import MODES, UnleasedModes
from gpuallocd.errors import ConfigError

__all__ = ["check_rule_settings", "parse_limits", "parse_unleased_modes"]

# Each limit by its key, as `Limits` declares it (whole number or not, smallest value).
_KEYS = {spec.name: spec for spec in LIMIT_SPECS}
_TABLES = ("group", "user")
MAX_LIMIT = 1e15  # past any real use; a larger (or infinite) value is a mistake
UNLEASED_KEY = "unleased_use"


def _number(value: Any, key: str, where: str) -> float:
    whole, minimum = _KEYS[key].whole, _KEYS[key].minimum
    number = isinstance(value, int) or (not whole and isinstance(value, float))
    if isinstance(value, bool) or not number or not abs(value) <= MAX_LIMIT:
        raise ConfigError(
            f"{where}: {key} must be {'an integer' if whole else 'a number'} "
            f"from 0 to {MAX_LIMIT:.0e}"
        )
    if value < minimum:
        raise ConfigError(f"{where}: {key} must be {'positive' if minimum else 'at least 0'}")
    return float(value)


def _limits(table: Mapping[str, Any], where: str, nested: bool) -> Limits:
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key in _KEYS:
            number = _number(value, key, where)
            values[key] = int(number) if _KEYS[key].whole else number
        elif key != UNLEASED_KEY and not (nested and key in _TABLES):
            known = ", ".join([*_KEYS, UNLEASED_KEY, *(_TABLES if nested else ())])
            raise ConfigError(f"{where}: unknown key {key!r} (known: {known})")
    _mode(table.get(UNLEASED_KEY), where)  # checked here; read by `parse_unleased_modes`
    return Limits(**values)


def _mode(value: Any, where: str) -> str | None:
    """A table's `unleased_use` (docs/enforcement.md), checked."""
    if value is None:
        return None
    if value not in MODES:
        raise ConfigError(f"{where}: {UNLEASED_KEY} must be one of {', '.join(MODES)}")
    return str(value)


def _overrides(data: Mapping[str, Any], kind: str, where: str) -> dict[str, Limits]:
    tables = data.get(kind, {})
    if not isinstance(tables, Mapping):
        raise ConfigError(f"{where}: limits.{kind} must be a table of {kind} names")
    found = {}
    for name, table in tables.items():
        label = f"{where}: [limits.{kind}.{name}]"
        if not isinstance(table, Mapping):
            raise ConfigError(f"{label} must be a table")
        found[str(name)] = _limits(table, label, nested=False)
    return found


def parse_unleased_modes(data: Any, where: str) -> UnleasedModes:
    """The `unleased_use` keys of the `[limits]` group and user tables: enforcement's rules,
    written beside the limits but never part of them (`parse_limits` checks them)."""
    if not isinstance(data, Mapping):
        return UnleasedModes()
    found: dict[str, dict[str, str]] = {"group": {}, "user": {}}
    for kind, modes in found.items():
        tables = data.get(kind, {})
        for name, table in tables.items() if isinstance(tables, Mapping) else ():
            mode = _mode(table.get(UNLEASED_KEY), where) if isinstance(table, Mapping) else None
            if mode is not None:
                modes[str(name)] = mode
    return UnleasedModes(users=found["user"], groups=found["group"])


def parse_limits(data: Any, where: str) -> LimitsTable:
    """The `[limits]` table as read by tomllib; ConfigError on any bad key, type or value."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: limits must be a table ([limits])")
    return LimitsTable(
        default=_limits(data, f"{where}: [limits]", nested=True),
        groups=_overrides(data, "group", where),
        users=_overrides(data, "user", where),
    )


def check_rule_settings(config: DaemonConfig) -> None:
    """The idle and retention settings are in range (ConfigError naming the key if not)."""
    if config.idle_reclaim_minutes is not None and config.idle_reclaim_minutes <= 0:
        raise ConfigError("idle_reclaim_minutes must be positive (leave it unset to turn it off)")
    if config.idle_grace_minutes < 0:
        raise ConfigError("idle_grace_minutes must be at least 0")
    if config.history_retention_days <= 0:
        raise ConfigError("history_retention_days must be positive")
    if config.driver_call_timeout_seconds <= 0:
        raise ConfigError("driver_call_timeout_seconds must be positive")
    if any(not group for group in config.admin_groups):
        raise ConfigError("admin_groups must name groups (no empty names)")
