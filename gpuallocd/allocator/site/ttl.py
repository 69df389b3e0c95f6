"""The lifetime a grant gets: one rule for grants, renewals, adoptions and the queue's estimates.

A request names a TTL or takes the site's default. The site's maximum bounds both: a TTL that
is not positive or passes it is refused (`invalid_request`). A caller's `max_ttl_seconds`
limit cuts a default down to it, and refuses a TTL the caller named above it
(`quota_exceeded`). An advance reservation may shorten a default further (a backfill, in
`reservation_board.py`); nothing else changes a lease's lifetime.

Pure: the bounds in, a number or an error out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuallocd.errors import InvalidRequest, QuotaExceeded
from gpuallocd.model.durations import typed_duration

__all__ = ["TtlBounds", "expected_ttl", "granted_ttl", "longest_ttl"]


@dataclass(frozen=True)
class TtlBounds:
    """What bounds one caller's lease lifetimes: the site's settings and their own limit."""

    default_seconds: float
    site_max_seconds: float
    user_max_seconds: float | None = None
    user: str = ""
    user_max_source: str = ""


def granted_ttl(bounds: TtlBounds, requested: float | None) -> float:
    """The TTL a request gets, or the error that refuses it (and changes nothing)."""
    ttl = bounds.default_seconds if requested is None else requested
    if not ttl > 0:
        raise InvalidRequest("the TTL must be more than 0s", field="ttl_seconds", value=ttl)
    if ttl > bounds.site_max_seconds:
        raise InvalidRequest(
            f"a TTL of {_typed(ttl)} is more than this node allows: at most "
            f"{typed_duration(bounds.site_max_seconds)} (max_ttl_seconds)",
            field="ttl_seconds",
            value=ttl,
        )
    limit = bounds.user_max_seconds
    if limit is None or ttl <= limit:
        return ttl
    if requested is None:
        return limit
    raise QuotaExceeded(
        f"a TTL of {typed_duration(ttl)}: {bounds.user} may lease for at most "
        f"{typed_duration(limit)} (max_ttl_seconds, {bounds.user_max_source})",
        limit="max_ttl_seconds",
        value=limit,
        current=ttl,
    )


def expected_ttl(bounds: TtlBounds, requested: float | None) -> float:
    """The TTL a waiter's grant will get, for the queue's estimates: as `granted_ttl`, but a
    request the bounds would now refuse (the site's rules were reloaded since it queued) is
    estimated at the longest lifetime it could get rather than refused."""
    try:
        return granted_ttl(bounds, requested)
    except (InvalidRequest, QuotaExceeded):
        return longest_ttl(bounds)


def longest_ttl(bounds: TtlBounds) -> float:
    """The longest lifetime any lease of this caller may have (an adoption gets it)."""
    limit = bounds.user_max_seconds
    return bounds.site_max_seconds if limit is None else min(limit, bounds.site_max_seconds)


def _typed(seconds: float) -> str:
    return typed_duration(seconds) if math.isfinite(seconds) else "forever"
