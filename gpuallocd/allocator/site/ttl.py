"""The lifetime a grant gets: one rule for grants, renewals, adoptions and the queue's estimates.

A request names a TTL or takes the site's default. The site's maximum bounds both: a TTL that
is not positive or passes it is refused (`invalid_request`). A caller's `max_ttl_seconds`
limit cuts a default down to it, and refuses a TTL the caller named above it
(`quota_exceeded`). An advance reservation may shorten a default further (a backfill, in
`reservation_board.py`); nothing else changes a lease's lifetime.

Pure: the bounds in, a number or an error out.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuallocd.errors import InvalidRequest, QuotaExceeded

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
        raise InvalidRequest("ttl_seconds must be positive", field="ttl_seconds", value=ttl)
    if ttl > bounds.site_max_seconds:
        raise InvalidRequest(
            f"ttl_seconds may be at most {bounds.site_max_seconds:g}",
            field="ttl_seconds",
            value=ttl,
        )
    limit = bounds.user_max_seconds
    if limit is None or ttl <= limit:
        return ttl
    if requested is None:
        return limit
    raise QuotaExceeded(
        f"a TTL of {ttl:g} s: max_ttl_seconds = {limit:g} for {bounds.user} "
        f"({bounds.user_max_source})",
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
