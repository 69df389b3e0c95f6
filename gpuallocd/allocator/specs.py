"""What the allocator is asked for, and the settings it enforces: plain immutable values."""

from __future__ import annotations

from dataclasses import dataclass

from gpuallocd.errors import InvalidRequest

__all__ = ["AllocateSpec", "AllocatorSettings", "requested_ttl"]


@dataclass(frozen=True, slots=True)
class AllocatorSettings:
    """The daemon's settings that decide a grant (see the settings table)."""

    default_policy: str = "best-effort"
    default_ttl_seconds: float = 3600.0
    max_ttl_seconds: float = 7 * 24 * 3600.0
    shared_gpus: tuple[str, ...] = ()
    share_memory_reserve_bytes: int = 0
    share_enforcement: str = "off"  # off, warn, kill
    queue_order: str = "fifo"  # fifo, fair-share (docs/scheduling.md)
    fair_share_half_life_hours: float = 7 * 24.0
    fair_share_wait_weight: float = 1.0  # priority (GPU-hours) gained per hour of waiting
    fair_share_by: str = "user"  # user, group (the owner's primary group)
    fair_share_counts_unleased: bool = False  # unleased use counts as GPU-hours in fair share


@dataclass(frozen=True, slots=True)
class AllocateSpec:
    """An allocation request as the API read it: `count` GPUs in all, `gpus` (UUIDs or indices)
    among them. Its rules are checked by `policies.rules.request_for` when it is served.

    `memory_bytes` asks for a share of that much memory on each of `count` shared GPUs;
    `mig_profile` for `count` MIG instances of that profile (`gpus` may name `MIG-` UUIDs)."""

    count: int | None = None
    gpus: tuple[str | int, ...] = ()
    policy: str | None = None
    ttl_seconds: float | None = None
    label: str | None = None
    min_free_memory_bytes: int | None = None
    bind_to_process: bool = False
    memory_bytes: int | None = None
    mig_profile: str | None = None
    request_id: str | None = None  # a retried request with the same id gets the same lease
    on_revoke: str = "notify"  # "terminate": a revoke stops the lease's processes
    power_limit_watts: float | None = None  # cap the leased GPUs' power (allocator/power_caps.py)


def requested_ttl(settings: AllocatorSettings, requested: float | None) -> float:
    """The TTL a request asks for (the default when it names none), within the site's bounds."""
    ttl = settings.default_ttl_seconds if requested is None else requested
    if ttl <= 0:
        raise InvalidRequest("ttl_seconds must be positive", field="ttl_seconds", value=ttl)
    if ttl > settings.max_ttl_seconds:
        raise InvalidRequest(
            f"ttl_seconds may be at most {settings.max_ttl_seconds:g}",
            field="ttl_seconds",
            value=ttl,
        )
    return ttl
