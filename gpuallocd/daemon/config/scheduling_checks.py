"""Checks of the scheduling settings (queue order, fair share) that their types cannot say."""

from __future__ import annotations

import math
from typing import Protocol

from gpuallocd.errors import ConfigError

__all__ = ["check_scheduling_settings"]

MAX_PREEMPT_SECONDS = 7 * 86400.0  # the preemption terms (docs/preemption.md): a week at most


class _Scheduling(Protocol):
    @property
    def fair_share_half_life_hours(self) -> float: ...

    @property
    def fair_share_wait_weight(self) -> float: ...

    @property
    def preempt_min_runtime_seconds(self) -> float: ...

    @property
    def preempt_lead_seconds(self) -> float: ...

    @property
    def preempt_grace_seconds(self) -> float: ...


def check_scheduling_settings(config: _Scheduling) -> None:
    """A half-life and a wait weight must be positive and finite (a zero weight would let a
    heavy account's waiter starve); the preemption terms from 0 to a week."""
    for name in ("fair_share_half_life_hours", "fair_share_wait_weight"):
        value = getattr(config, name)
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{name} must be a positive number, not {value!r}")
    for name in ("preempt_min_runtime_seconds", "preempt_lead_seconds", "preempt_grace_seconds"):
        value = getattr(config, name)
        if not (math.isfinite(value) and 0 <= value <= MAX_PREEMPT_SECONDS):
            raise ConfigError(f"{name} must be from 0 to {MAX_PREEMPT_SECONDS:g} seconds")
