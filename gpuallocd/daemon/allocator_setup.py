"""The allocator's settings, from the daemon's config."""

from __future__ import annotations

from gpuallocd.allocator import AllocatorSettings
from gpuallocd.daemon.settings import DaemonConfig

__all__ = ["allocator_settings"]


def allocator_settings(config: DaemonConfig) -> AllocatorSettings:
    return AllocatorSettings(
        default_policy=config.default_policy,
        default_ttl_seconds=config.default_ttl_seconds,
        max_ttl_seconds=config.max_ttl_seconds,
        shared_gpus=config.shared_gpus,
        share_memory_reserve_bytes=config.share_memory_reserve_bytes,
        share_enforcement=config.share_enforcement,
        queue_order=config.queue_order,
        fair_share_half_life_hours=config.fair_share_half_life_hours,
        fair_share_wait_weight=config.fair_share_wait_weight,
        fair_share_by=config.fair_share_by,
        fair_share_counts_unleased=config.fair_share_unleased == "count",
    )
