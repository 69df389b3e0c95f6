"""Per-user limits: the table an admin writes, which value applies to whom, and the check of
a request against a caller's current use.

Pure: no I/O and no clock. The most specific value wins, key by key: the user's own entry,
else the most generous of the groups the user is in that set the key, else the default. A
key set nowhere is no limit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from gpuallocd.allocator.site.budgets import budget_field
from gpuallocd.errors import QuotaExceeded
from gpuallocd.model import Lease, LeasedGpu, UnitKind
from gpuallocd.model.durations import typed_duration

__all__ = [
    "BUDGETS",
    "LIMIT_NAMES",
    "LIMIT_SPECS",
    "AppliedLimits",
    "LimitSpec",
    "Limits",
    "LimitsTable",
    "Usage",
    "check_grant",
    "check_waiting",
    "counts_apart",
    "gpus_held",
    "shares_held",
    "units_weight",
]


def _limit(*, whole: bool, minimum: float, meaning: str = "") -> Any:
    """A limit's field: None (not set in this row) by default; a config value must be a
    whole number where `whole`, and at least `minimum` (a positive `minimum`: above 0)."""
    metadata = {"limit": True, "whole": whole, "minimum": minimum, "meaning": meaning}
    return field(default=None, metadata=metadata)


@dataclass(frozen=True, slots=True)
class Limits:
    """One row of the table: None where this row does not set the limit.

    Each limit is named here once: the config's keys, their checks (`limit_spec`), the
    order `limits` shows them in and the use they are held against all come from these
    fields."""

    max_gpus: float | None = _limit(whole=False, minimum=0.0)
    max_ttl_seconds: float | None = _limit(whole=False, minimum=1e-9)
    max_waiting: int | None = _limit(whole=True, minimum=0.0)
    max_gpu_hours_per_day: float | None = budget_field("gpu_hours", "day")
    max_shares: int | None = _limit(whole=True, minimum=0.0)
    max_gpu_hours_per_week: float | None = budget_field("gpu_hours", "week")
    max_gpu_hours_per_month: float | None = budget_field("gpu_hours", "month")
    max_kwh_per_day: float | None = budget_field("kwh", "day")
    max_kwh_per_week: float | None = budget_field("kwh", "week")
    max_kwh_per_month: float | None = budget_field("kwh", "month")
    max_power_limit_watts: float | None = _limit(
        whole=False, minimum=1.0, meaning="the highest power cap a user's lease may have (W)"
    )
    max_preemptible_gpus: float | None = _limit(
        whole=False,
        minimum=0.0,
        meaning="GPUs a user may hold in preemptible leases, counted apart from max_gpus "
        "(unset: preemptible leases count against max_gpus like any)",
    )
    preempt_min_runtime_seconds: float | None = _limit(
        whole=False,
        minimum=0.0,
        meaning="the longest minimum runtime a preemptible lease may have (its default)",
    )
    preempt_lead_seconds: float | None = _limit(
        whole=False,
        minimum=0.0,
        meaning="the longest warning before the signal a preemptible lease may have (its default)",
    )
    preempt_grace_seconds: float | None = _limit(
        whole=False,
        minimum=0.0,
        meaning="the longest time from the signal to the kill a preemptible lease may have "
        "(its default)",
    )

    def value(self, name: str) -> float | None:
        found: float | None = getattr(self, name)
        return found


# Budgets (budgets.py): name -> (what it measures, its window in seconds).
BUDGETS = {f.name: f.metadata["budget"] for f in fields(Limits) if "budget" in f.metadata}


@dataclass(frozen=True)
class LimitSpec:
    """What a config value of one limit must be."""

    name: str
    whole: bool
    minimum: float


LIMIT_SPECS = tuple(
    LimitSpec(f.name, f.metadata["whole"], f.metadata["minimum"])
    for f in fields(Limits)
    if f.metadata.get("limit")
)
LIMIT_NAMES = tuple(spec.name for spec in LIMIT_SPECS)


@dataclass(frozen=True)
class LimitsTable:
    """The `[limits]` section: defaults for everyone, per-group and per-user overrides."""

    default: Limits = field(default_factory=Limits)
    groups: Mapping[str, Limits] = field(default_factory=dict)
    users: Mapping[str, Limits] = field(default_factory=dict)
    # What `applied` found per user and groups: the table never changes (a new config is a
    # new table), and every grant asks it twice.
    _applied: dict[tuple[str, frozenset[str]], AppliedLimits] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def applied(self, user: str, groups: Iterable[str]) -> AppliedLimits:
        """The limits that apply to `user`, a member of `groups`, with where each came from."""
        key = (user, frozenset(groups))
        found = self._applied.get(key)
        if found is None:
            found = self._applied[key] = self._resolve_all(user, key[1])
        return found

    def _resolve_all(self, user: str, groups: frozenset[str]) -> AppliedLimits:
        member_of = sorted(g for g in groups if g in self.groups)
        values: dict[str, float | None] = {}
        sources: dict[str, str] = {}
        for name in LIMIT_NAMES:
            values[name], sources[name] = self._resolve(name, user, member_of)
        return AppliedLimits(user=user, values=values, sources=sources)

    def _resolve(self, name: str, user: str, groups: list[str]) -> tuple[float | None, str]:
        own = self.users.get(user)
        if own is not None and own.value(name) is not None:
            return own.value(name), f"user {user}"
        by_group = [(self.groups[g].value(name), g) for g in groups]
        set_by_groups = [(v, g) for v, g in by_group if v is not None]
        if set_by_groups:
            value, group = max(set_by_groups, key=lambda pair: (pair[0], pair[1]))
            return value, f"group {group}"
        default = self.default.value(name)
        return default, "default" if default is not None else "none"


@dataclass(frozen=True)
class AppliedLimits:
    """The limits of one user: each value (None: no limit) and where it was set."""

    user: str
    values: Mapping[str, float | None]
    sources: Mapping[str, str]

    def value(self, name: str) -> float | None:
        return self.values[name]


@dataclass(frozen=True, slots=True)
class Usage:
    """What a user holds and does now, in the units of the limits."""

    gpus: float = 0.0  # counted against max_gpus (preemptible ones apart where they count apart)
    waiting: int = 0
    shares: int = 0
    budgets: Mapping[str, float] = field(default_factory=dict)  # use in each budget's window
    preemptible_gpus: float = 0.0  # held in preemptible leases

    def current(self, name: str) -> float | None:
        """The use that `name` limits; None for those that limit a request (`max_ttl_seconds`,
        the preemption terms)."""
        return {
            "max_gpus": self.gpus,
            "max_preemptible_gpus": self.preemptible_gpus,
            "max_waiting": float(self.waiting),
            "max_shares": float(self.shares),
            **self.budgets,
        }.get(name)

    def to_json(self) -> dict[str, Any]:
        return {name: self.current(name) for name in LIMIT_NAMES}


def units_weight(units: Iterable[LeasedGpu], shared_already: Iterable[str] = ()) -> float:
    """What `units` take from everyone else, in GPUs, against `max_gpus`.

    A whole GPU counts 1, a MIG instance or a partition its fraction. A share counts as the
    whole GPU it is on: a GPU holding a share is never leased whole, so one byte of it takes
    the GPU from every whole-GPU request. Shares on one GPU count it once, and a GPU in
    `shared_already` (the holder's shares elsewhere) is not counted again.
    """
    counted = set(shared_already)
    weight = 0.0
    for unit in units:
        if unit.kind is not UnitKind.SHARE:
            weight += unit.fraction
        elif unit.gpu_uuid not in counted:
            counted.add(unit.gpu_uuid)
            weight += 1.0
    return weight


def _units_of(leases: Iterable[Lease], uid: int) -> list[LeasedGpu]:
    return [unit for lease in leases if lease.owner_uid == uid for unit in lease.gpus]


def gpus_held(leases: Iterable[Lease], uid: int) -> float:
    """The GPUs the user `uid` holds in these leases, as `units_weight` counts them."""
    return units_weight(_units_of(leases, uid))


def counts_apart(limits: AppliedLimits) -> bool:
    """Whether the user's preemptible leases count against `max_preemptible_gpus` instead of
    `max_gpus` (where the site set it for them)."""
    return limits.value("max_preemptible_gpus") is not None


def shares_held(leases: Iterable[Lease], uid: int) -> list[LeasedGpu]:
    """The memory shares the user `uid` holds in these leases."""
    return [unit for unit in _units_of(leases, uid) if unit.kind is UnitKind.SHARE]


def _refuse(limits: AppliedLimits, name: str, current: float, message: str) -> QuotaExceeded:
    value = limits.value(name)
    where = limits.sources[name]
    timed = value is not None and name.endswith("_seconds")
    shown = typed_duration(value) if timed and value is not None else f"{value:g}"
    return QuotaExceeded(
        f"{message}: {name} = {shown} for {limits.user} ({where})",
        limit=name,
        value=value,
        current=current,
    )


def check_grant(
    limits: AppliedLimits,
    usage: Usage,
    *,
    gpus: float,
    shares: int = 0,
    preemptible: bool = False,
) -> None:
    """Refuse (QuotaExceeded) a grant of `gpus` (`shares` of them memory shares) that would
    pass a limit. A preemptible grant counts against `max_preemptible_gpus` where the user
    has it, else against `max_gpus` like any. A lease's lifetime is checked where it is
    decided (`ttl.py`), a preemptible lease's terms in `preempt_bounds.py`."""
    if preemptible and counts_apart(limits):
        _check_gpus(limits, "max_preemptible_gpus", usage.preemptible_gpus, gpus, "preemptible ")
    else:
        _check_gpus(limits, "max_gpus", usage.gpus, gpus)
    max_shares = limits.value("max_shares")
    if shares and max_shares is not None and usage.shares + shares > max_shares:
        message = f"{limits.user} holds {usage.shares} share(s) and asks for {shares} more"
        raise _refuse(limits, "max_shares", usage.shares, message)


def _check_gpus(limits: AppliedLimits, name: str, held: float, gpus: float, kind: str = "") -> None:
    value = limits.value(name)
    if value is not None and held + gpus > value:
        message = f"{limits.user} holds {held:g} {kind}GPU(s) and asks for {gpus:g} more"
        raise _refuse(limits, name, held, message)


def check_waiting(limits: AppliedLimits, waiting: int) -> None:
    """Refuse one more waiting request when the user already has `max_waiting` in the queue."""
    max_waiting = limits.value("max_waiting")
    if max_waiting is not None and waiting >= max_waiting:
        message = f"{limits.user} already has {waiting} request(s) waiting"
        raise _refuse(limits, "max_waiting", waiting, message)
