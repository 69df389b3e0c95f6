"""The terms a preemptible lease is granted with: one rule for every grant (docs/preemption.md).

Each term (minimum runtime, warning lead, grace) has a bound for the caller: their own
`[limits]` value where one applies (the user's entry, else the most generous of their groups,
else the table's default), else the site's setting of the same name. A request that names no
value gets the bound; one that names less gets what it named; one that names more is refused
(`quota_exceeded`), so a user can never buy a longer protection than the site gives them.

Pure: the caller's limits and the site's settings in, the terms or an error out.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuallocd.allocator.site.limits import AppliedLimits
from gpuallocd.errors import InvalidRequest, QuotaExceeded
from gpuallocd.model.durations import typed_duration
from gpuallocd.model.preemption import DEFAULT_SIGNAL, SIGNALS, PreemptTerms

__all__ = ["TERM_NAMES", "PreemptAsk", "PreemptDefaults", "preempt_terms"]

TERM_NAMES = ("preempt_min_runtime_seconds", "preempt_lead_seconds", "preempt_grace_seconds")
MAX_TERM_SECONDS = 7 * 86400.0


@dataclass(frozen=True, slots=True)
class PreemptDefaults:
    """The site's settings: each term's bound where no `[limits]` value applies."""

    preempt_min_runtime_seconds: float = 1800.0
    preempt_lead_seconds: float = 60.0
    preempt_grace_seconds: float = 300.0


@dataclass(frozen=True, slots=True)
class PreemptAsk:
    """What a request named (None: the bound)."""

    min_runtime_seconds: float | None = None
    lead_seconds: float | None = None
    grace_seconds: float | None = None
    signal: str | None = None


def _term(name: str, asked: float | None, limits: AppliedLimits, site: PreemptDefaults) -> float:
    own = limits.value(name)
    bound = float(getattr(site, name)) if own is None else own
    if asked is None:
        return bound
    if not 0 <= asked <= MAX_TERM_SECONDS:
        raise InvalidRequest(
            f"{name} must be from 0s to {typed_duration(MAX_TERM_SECONDS)}", field=name
        )
    if asked <= bound:
        return asked
    source = limits.sources[name] if own is not None else "the site's setting"
    raise QuotaExceeded(
        f"{name} of {typed_duration(asked)}: {limits.user}'s preemptible leases may have at "
        f"most {typed_duration(bound)} ({name}, {source})",
        limit=name,
        value=bound,
        current=asked,
    )


def preempt_terms(
    limits: AppliedLimits,
    site: PreemptDefaults,
    asked: PreemptAsk,
    *,
    queued_since: float,
    requeue_of: str | None = None,
) -> PreemptTerms:
    """The terms of a preemptible grant to the user `limits` are for, or the error that refuses
    the request (and changes nothing)."""
    signal = DEFAULT_SIGNAL if asked.signal is None else asked.signal
    if signal not in SIGNALS:
        raise InvalidRequest(
            f"preempt_signal must be one of {', '.join(SIGNALS)}", field="preempt_signal"
        )
    return PreemptTerms(
        min_runtime_seconds=_term(
            "preempt_min_runtime_seconds", asked.min_runtime_seconds, limits, site
        ),
        lead_seconds=_term("preempt_lead_seconds", asked.lead_seconds, limits, site),
        grace_seconds=_term("preempt_grace_seconds", asked.grace_seconds, limits, site),
        signal=signal,
        queued_since=queued_since,
        requeue_of=requeue_of,
    )
