"""What the allocator is asked for, and the settings it enforces: plain immutable values."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuallocd.allocator.site.preempt_bounds import PreemptAsk, PreemptDefaults
from gpuallocd.allocator.site.request_bounds import RequestAsk, SiteBounds

__all__ = ["AllocateSpec", "AllocatorSettings"]


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
    preempt_min_runtime_seconds: float = 1800.0  # preemptible leases (docs/preemption.md)
    preempt_lead_seconds: float = 60.0
    preempt_grace_seconds: float = 300.0
    lease_power_limit_watts: float | None = None  # the cap of a lease that asks for none

    @property
    def preempt_defaults(self) -> PreemptDefaults:
        """The site's preemption terms, the bounds where no `[limits]` value applies."""
        return PreemptDefaults(
            self.preempt_min_runtime_seconds, self.preempt_lead_seconds, self.preempt_grace_seconds
        )

    @property
    def bounds(self) -> SiteBounds:
        """The settings that bound every request (site/request_bounds.py)."""
        return SiteBounds(
            self.default_ttl_seconds,
            self.max_ttl_seconds,
            self.lease_power_limit_watts,
            self.preempt_defaults,
        )


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
    follow_work: bool = False  # bound: the work carrying its id keeps it after the holder
    power_limit_watts: float | None = None  # cap the leased GPUs' power (allocator/power/caps.py)
    preemptible: bool = False  # may be preempted (docs/preemption.md), on the terms asked
    preempt: PreemptAsk = field(default_factory=PreemptAsk)
    requeue_of: str | None = None  # a preempted lease of the caller's whose place it keeps
    queued_since: float | None = None  # that place (the daemon's, from the ledger; never asked)

    @property
    def ask(self) -> RequestAsk:
        """What it asks of its bounds, resolved at the grant (site/request_bounds.py)."""
        return RequestAsk(
            self.ttl_seconds,
            self.power_limit_watts,
            self.preemptible,
            self.preempt,
            self.requeue_of,
        )
