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
from gpuallocd.allocator.limits import DECLARED
from gpuallocd.daemon.settings import DaemonConfig
from gpuallocd.enforcement import MODES
from gpuallocd.errors import ConfigError

__all__ = ["check_rule_settings", "parse_limits"]

# Each limit: whether it must be a whole number, and the smallest value allowed.
_KEYS: dict[str, tuple[bool, float]] = {
    "max_gpus": (False, 0.0),
    "max_ttl_seconds": (False, 1e-9),
    "max_waiting": (True, 0.0),
    "max_gpu_hours_per_day": (False, 0.0),
    "max_shares": (True, 0.0),
}
_KEYS.update({name: (False, meta["minimum"]) for name, meta in DECLARED.items()})
_TABLES = ("group", "user")
MAX_LIMIT = 1e15  # past any real use; a larger (or infinite) value is a mistake
UNLEASED_KEY = "unleased_use"


def _number(value: Any, key: str, where: str) -> float:
    whole, minimum = _KEYS[key]
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
    values: dict[str, float] = {}
    for key, value in table.items():
        if key in _KEYS:
            values[key] = _number(value, key, where)
        elif key != UNLEASED_KEY and not (nested and key in _TABLES):
            known = ", ".join([*_KEYS, UNLEASED_KEY, *(_TABLES if nested else ())])
            raise ConfigError(f"{where}: unknown key {key!r} (known: {known})")
    waiting, shares = values.get("max_waiting"), values.get("max_shares")
    return Limits(
        max_gpus=values.get("max_gpus"),
        max_ttl_seconds=values.get("max_ttl_seconds"),
        max_waiting=None if waiting is None else int(waiting),
        max_gpu_hours_per_day=values.get("max_gpu_hours_per_day"),
        max_shares=None if shares is None else int(shares),
        unleased_use=_mode(table.get(UNLEASED_KEY), where),
        **{name: values.get(name) for name in DECLARED},
    )


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
    if any(not group for group in config.admin_groups):
        raise ConfigError("admin_groups must name groups (no empty names)")
