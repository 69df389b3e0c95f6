"""A request resolved in one place, at the grant: the lifetime it gets, the power cap of its
GPUs and, for a preemptible request, the terms of its preemption.

The API passes a request through as the caller sent it; the grant (and its dry run, the
preview) calls `resolve_terms` once, with what the request asked, the caller's limits and the
site's settings. The rules it composes: the lifetime (`ttl.py`), the preemption terms
(`preempt_bounds.py`) and the power cap here: the cap asked for (refused above the user's
`max_power_limit_watts`), else the site's `lease_power_limit_watts`, never above the user's
maximum; None: no cap. Each card then keeps the cap within its own range when it is set
(`allocator/power/caps.py`), which the preview shows GPU by GPU.

Pure: the bounds in, the terms or the error that refuses the request (and changes nothing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuallocd.allocator.site.limits import AppliedLimits
from gpuallocd.allocator.site.preempt_bounds import PreemptAsk, PreemptDefaults, preempt_terms
from gpuallocd.allocator.site.ttl import TtlBounds, granted_ttl
from gpuallocd.errors import QuotaExceeded
from gpuallocd.model.preemption import PreemptTerms

__all__ = [
    "GrantTerms",
    "RequestAsk",
    "SiteBounds",
    "power_cap",
    "resolve_terms",
    "ttl_bounds",
]

POWER_LIMIT = "max_power_limit_watts"


@dataclass(frozen=True, slots=True)
class SiteBounds:
    """The site's settings that bound every request (`default_ttl_seconds`, `max_ttl_seconds`,
    `lease_power_limit_watts`, the `preempt_*` terms)."""

    default_ttl_seconds: float = 3600.0
    max_ttl_seconds: float = 7 * 24 * 3600.0
    power_limit_watts: float | None = None
    preempt: PreemptDefaults = field(default_factory=PreemptDefaults)


@dataclass(frozen=True, slots=True)
class RequestAsk:
    """What a request asked for of its bounds (None: what the bounds give)."""

    ttl_seconds: float | None = None
    power_limit_watts: float | None = None
    preemptible: bool = False
    preempt: PreemptAsk = field(default_factory=PreemptAsk)
    requeue_of: str | None = None


@dataclass(frozen=True, slots=True)
class GrantTerms:
    """What a grant of the request gets: its lifetime before any reservation shortens a
    default (`reservation_board.py`), its GPUs' cap in watts, its preemption terms."""

    ttl_seconds: float
    power_limit_watts: float | None
    preemptible: PreemptTerms | None


def ttl_bounds(site: SiteBounds, limits: AppliedLimits) -> TtlBounds:
    """What bounds the lifetimes of the user `limits` are for."""
    return TtlBounds(
        default_seconds=site.default_ttl_seconds,
        site_max_seconds=site.max_ttl_seconds,
        user_max_seconds=limits.value("max_ttl_seconds"),
        user=limits.user,
        user_max_source=limits.sources["max_ttl_seconds"],
    )


def power_cap(site: SiteBounds, limits: AppliedLimits, requested: float | None) -> float | None:
    """The cap in watts the request's GPUs get, or QuotaExceeded above the user's maximum."""
    user_max = limits.value(POWER_LIMIT)
    if requested is not None and user_max is not None and requested > user_max:
        raise QuotaExceeded(
            f"a power limit of {requested:g} W: {POWER_LIMIT} = {user_max:g} for "
            f"{limits.user} ({limits.sources[POWER_LIMIT]})",
            limit=POWER_LIMIT,
            value=user_max,
            current=requested,
        )
    wanted = site.power_limit_watts if requested is None else requested
    if user_max is not None:
        wanted = user_max if wanted is None else min(wanted, user_max)
    return wanted


def resolve_terms(
    site: SiteBounds, limits: AppliedLimits, ask: RequestAsk, *, queued_since: float
) -> GrantTerms:
    """The terms of a grant to the user `limits` are for, in the order a refusal names them:
    the lifetime, the power cap, the preemption terms. `queued_since`: the request's place in
    the queue (a preemptible lease's, docs/preemption.md)."""
    ttl = granted_ttl(ttl_bounds(site, limits), ask.ttl_seconds)
    cap = power_cap(site, limits, ask.power_limit_watts)
    terms = None
    if ask.preemptible:
        terms = preempt_terms(
            limits, site.preempt, ask.preempt, queued_since=queued_since, requeue_of=ask.requeue_of
        )
    return GrantTerms(ttl_seconds=ttl, power_limit_watts=cap, preemptible=terms)
