"""Checks of the backup settings that their types cannot say."""

from __future__ import annotations

import math
from typing import Protocol

from gpuallocd.errors import ConfigError

__all__ = ["MAX_BACKUPS", "MIN_BACKUP_INTERVAL_SECONDS", "check_backup_settings"]

MAX_BACKUPS = 1000
MIN_BACKUP_INTERVAL_SECONDS = 1.0


class _Backups(Protocol):
    @property
    def ledger_backups(self) -> int: ...

    @property
    def ledger_backup_interval_seconds(self) -> float: ...


def check_backup_settings(config: _Backups) -> None:
    """From 0 to 1000 backups kept; an interval of at least a second."""
    if not 0 <= config.ledger_backups <= MAX_BACKUPS:
        raise ConfigError(f"ledger_backups must be from 0 to {MAX_BACKUPS}")
    interval = config.ledger_backup_interval_seconds
    if not (math.isfinite(interval) and interval >= MIN_BACKUP_INTERVAL_SECONDS):
        raise ConfigError(
            f"ledger_backup_interval_seconds must be at least {MIN_BACKUP_INTERVAL_SECONDS:g}"
        )
