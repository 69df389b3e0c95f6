"""Checks of the scheduling settings (queue order, fair share) that their types cannot say."""

from __future__ import annotations

import math
from typing import Protocol

from gpuallocd.errors import ConfigError

__all__ = ["check_scheduling_settings"]


class _Scheduling(Protocol):
    @property
    def fair_share_half_life_hours(self) -> float: ...

    @property
    def fair_share_wait_weight(self) -> float: ...


def check_scheduling_settings(config: _Scheduling) -> None:
    """A half-life and a wait weight must be positive and finite (a zero weight would let a
    heavy account's waiter starve)."""
    for name in ("fair_share_half_life_hours", "fair_share_wait_weight"):
        value = getattr(config, name)
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{name} must be a positive number, not {value!r}")
