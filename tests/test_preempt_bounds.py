"""The site bounds a preemptible lease: its terms (minimum runtime, lead, grace) per user and
group like any limit, and how far preemptible leases may go past `max_gpus`."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuallocd.allocator.site.limits import Limits, LimitsTable, Usage, check_grant
from gpuallocd.allocator.site.preempt_bounds import PreemptAsk, PreemptDefaults, preempt_terms
from gpuallocd.daemon.config.loading import load_config
from gpuallocd.errors import ConfigError, InvalidRequest, QuotaExceeded

SITE = PreemptDefaults(1800.0, 60.0, 300.0)
TABLE = LimitsTable(
    default=Limits(max_gpus=2),
    groups={
        "night": Limits(max_preemptible_gpus=8, preempt_min_runtime_seconds=3600.0),
        "short": Limits(preempt_min_runtime_seconds=600.0, preempt_grace_seconds=60.0),
    },
    users={"eve": Limits(preempt_grace_seconds=30.0)},
)


def test_a_request_naming_no_terms_gets_its_bounds() -> None:
    """Nothing asked: each term is the user's bound, the site's where no limit applies."""
    terms = preempt_terms(TABLE.applied("dave", []), SITE, PreemptAsk(), queued_since=5.0)
    assert (terms.min_runtime_seconds, terms.lead_seconds, terms.grace_seconds) == (
        1800.0,
        60.0,
        300.0,
    )
    assert (terms.signal, terms.queued_since) == ("SIGTERM", 5.0)


def test_the_most_generous_group_and_the_users_own_entry_set_the_bounds() -> None:
    """Groups as limits: the most generous one wins, a user's own entry over every group."""
    applied = TABLE.applied("carol", ["night", "short"])
    terms = preempt_terms(applied, SITE, PreemptAsk(), queued_since=0.0)
    assert (terms.min_runtime_seconds, terms.grace_seconds) == (3600.0, 60.0)
    eve = preempt_terms(TABLE.applied("eve", ["short"]), SITE, PreemptAsk(), queued_since=0.0)
    assert eve.grace_seconds == 30.0


def test_a_request_may_ask_for_less_never_more() -> None:
    """Less than the bound is granted as asked; more is refused, naming the limit and where it
    was set."""
    applied = TABLE.applied("dave", ["short"])
    asked = PreemptAsk(min_runtime_seconds=60.0, lead_seconds=0.0, grace_seconds=10.0)
    terms = preempt_terms(applied, SITE, asked, queued_since=0.0)
    assert (terms.min_runtime_seconds, terms.lead_seconds, terms.grace_seconds) == (60, 0, 10)
    with pytest.raises(QuotaExceeded, match=r"at most 10m .*group short") as refused:
        preempt_terms(applied, SITE, PreemptAsk(min_runtime_seconds=601.0), queued_since=0.0)
    assert refused.value.details["limit"] == "preempt_min_runtime_seconds"


@pytest.mark.parametrize("signal", ["SIGKILL", "SIGSTOP", "TERM", "", "SIGTERM\n"])
def test_only_a_signal_a_job_can_catch_may_be_chosen(signal: str) -> None:
    """SIGKILL and SIGSTOP, or a name that is none, are refused."""
    with pytest.raises(InvalidRequest, match="preempt_signal"):
        preempt_terms(TABLE.applied("dave", []), SITE, PreemptAsk(signal=signal), queued_since=0)


def test_preemptible_gpus_count_apart_where_the_site_allows_it() -> None:
    """With `max_preemptible_gpus`, preemptible leases count against it and not `max_gpus`;
    without it, against `max_gpus` like any lease."""
    night = TABLE.applied("nina", ["night"])
    check_grant(night, Usage(gpus=2, preemptible_gpus=6), gpus=2, preemptible=True)
    with pytest.raises(QuotaExceeded, match="holds 6 preemptible GPU") as refused:
        check_grant(night, Usage(gpus=0, preemptible_gpus=6), gpus=3, preemptible=True)
    assert refused.value.details["limit"] == "max_preemptible_gpus"
    with pytest.raises(QuotaExceeded, match="max_gpus"):
        check_grant(night, Usage(gpus=2, preemptible_gpus=0), gpus=1)
    dave = TABLE.applied("dave", [])
    with pytest.raises(QuotaExceeded, match="max_gpus"):
        check_grant(dave, Usage(gpus=2, preemptible_gpus=2), gpus=1, preemptible=True)


def test_the_preemption_keys_are_read_from_the_limits_table(tmp_path: Path) -> None:
    """The `[limits]` tables take the preemption keys with the same checks as every limit."""
    path = tmp_path / "c.toml"
    path.write_text(
        "preempt_grace_seconds = 120\n[limits.group.night]\nmax_preemptible_gpus = 8\n"
        "preempt_min_runtime_seconds = 900\n"
    )
    config = load_config(path, environ={})
    assert config.preempt_grace_seconds == 120.0
    night = config.limits.groups["night"]
    assert (night.max_preemptible_gpus, night.preempt_min_runtime_seconds) == (8.0, 900.0)
    path.write_text("[limits]\npreempt_lead_seconds = -1\n")
    with pytest.raises(ConfigError, match="preempt_lead_seconds"):
        load_config(path, environ={})
    path.write_text("preempt_grace_seconds = 1e9\n")
    with pytest.raises(ConfigError, match="preempt_grace_seconds"):
        load_config(path, environ={})
