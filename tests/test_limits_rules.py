"""The pure rules: which limit applies to whom, the checks, idle decisions, accounting sums,
and the strict reading of the `[limits]` table."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from gpuallocd.allocator.site.budgets import TotalsUse, check_budgets
from gpuallocd.allocator.site.idle import IdleRules, IdleTracker
from gpuallocd.allocator.site.limits import (
    BUDGETS,
    Limits,
    LimitsTable,
    Usage,
    check_grant,
    check_waiting,
)
from gpuallocd.allocator.site.ttl import TtlBounds, expected_ttl, granted_ttl, longest_ttl
from gpuallocd.cli.looking.limits import parse_since
from gpuallocd.daemon.config.loading import load_config
from gpuallocd.errors import ConfigError, InvalidRequest, QuotaExceeded
from gpuallocd.model import GpuProcess, Lease, LeasedGpu, LeaseSpan, LiveState, UserUsage

TABLE = LimitsTable(
    default=Limits(max_gpus=4, max_ttl_seconds=86400, max_waiting=2),
    groups={"students": Limits(max_gpus=2), "staff": Limits(max_gpus=3, max_waiting=5)},
    users={"alice": Limits(max_gpus=8)},
)


def test_the_most_specific_value_wins_key_by_key() -> None:
    """A user's entry beats the groups, a group beats the default, one key at a time."""
    alice = TABLE.applied("alice", ["students"])
    assert (alice.value("max_gpus"), alice.sources["max_gpus"]) == (8, "user alice")
    assert (alice.value("max_waiting"), alice.sources["max_waiting"]) == (2, "default")
    bob = TABLE.applied("bob", ["students", "other"])
    assert (bob.value("max_gpus"), bob.sources["max_gpus"]) == (2, "group students")


def test_the_most_generous_group_wins() -> None:
    """In students (2) and staff (3), a user gets 3, even where the default is higher."""
    carol = TABLE.applied("carol", ["students", "staff"])
    assert (carol.value("max_gpus"), carol.sources["max_gpus"]) == (3, "group staff")
    assert carol.value("max_waiting") == 5


def test_the_limits_of_a_user_and_groups_are_resolved_once() -> None:
    """Every grant asks twice; the table answers from what it found the first time, and the
    same user in other groups is another question."""
    table = LimitsTable(groups={"staff": Limits(max_gpus=3)})
    first = table.applied("erin", ["staff", "other"])
    assert table.applied("erin", ("other", "staff")) is first
    assert table.applied("erin", []).value("max_gpus") is None
    assert first.value("max_gpus") == 3
    assert table == LimitsTable(groups={"staff": Limits(max_gpus=3)})  # the memo is no field


def test_a_limit_set_nowhere_is_no_limit() -> None:
    """max_gpu_hours_per_day set in no table applies to no one; nothing is refused for it."""
    dave = TABLE.applied("dave", [])
    assert (dave.value("max_gpu_hours_per_day"), dave.sources["max_gpu_hours_per_day"]) == (
        None,
        "none",
    )
    check_grant(dave, Usage(gpus=0), gpus=1)

    def no_reading() -> TotalsUse:
        raise AssertionError("no budget applies: the use is never read")

    check_budgets(BUDGETS, dave.value, dave.sources.__getitem__, "dave", no_reading)


@pytest.mark.parametrize(
    ("usage", "gpus", "expected"),
    [
        (Usage(gpus=3), 2, {"limit": "max_gpus", "value": 4, "current": 3}),
        (Usage(), 5, {"limit": "max_gpus", "value": 4, "current": 0}),
    ],
)
def test_a_grant_over_a_limit_is_refused_with_the_numbers(
    usage: Usage, gpus: float, expected: dict[str, float]
) -> None:
    """check_grant names the limit, its value and the current use in the error's details."""
    with pytest.raises(QuotaExceeded) as refused:
        check_grant(TABLE.applied("dave", []), usage, gpus=gpus)
    assert refused.value.details == expected


def _bounds(user_max: float | None) -> TtlBounds:
    return TtlBounds(
        default_seconds=3600,
        site_max_seconds=7 * 86400,
        user_max_seconds=user_max,
        user="dave",
        user_max_source="user dave",
    )


def test_a_ttl_over_the_users_limit_is_refused_with_the_numbers() -> None:
    """A TTL the caller names above their max_ttl_seconds is refused, naming the limit."""
    with pytest.raises(QuotaExceeded) as refused:
        granted_ttl(_bounds(86400), 90000)
    assert refused.value.details == {"limit": "max_ttl_seconds", "value": 86400, "current": 90000}


@pytest.mark.parametrize(
    ("user_max", "requested", "granted"),
    [(None, None, 3600), (600, None, 600), (600, 300, 300), (None, 7 * 86400, 7 * 86400)],
)
def test_one_rule_decides_a_grants_ttl(
    user_max: float | None, requested: float | None, granted: float
) -> None:
    """The default when none is named, cut to the user's limit; a named TTL kept as named."""
    assert granted_ttl(_bounds(user_max), requested) == granted


@pytest.mark.parametrize("requested", [0, -1, float("nan"), 7 * 86400 + 1, float("inf")])
def test_a_ttl_outside_the_sites_bounds_is_invalid(requested: float) -> None:
    """Not positive, or past the site's maximum: invalid_request, whoever asks."""
    with pytest.raises(InvalidRequest):
        granted_ttl(_bounds(None), requested)


def test_estimates_and_adoptions_use_the_same_rule() -> None:
    """The queue's estimate of a waiter's lifetime is what its grant will be; an adoption
    gets the longest lifetime its owner may have."""
    assert expected_ttl(_bounds(600), None) == granted_ttl(_bounds(600), None) == 600
    assert expected_ttl(_bounds(600), 9000) == 600  # refused now: estimated at the longest
    assert longest_ttl(_bounds(600)) == 600
    assert longest_ttl(_bounds(None)) == 7 * 86400


def test_a_grant_exactly_at_the_limit_is_allowed_and_waiting_counts() -> None:
    """Holding 3 of 4, one more GPU is fine; a third waiting request with max_waiting 2 is not."""
    dave = TABLE.applied("dave", [])
    check_grant(dave, Usage(gpus=3), gpus=1)
    check_waiting(dave, 1)
    with pytest.raises(QuotaExceeded, match="max_waiting = 2"):
        check_waiting(dave, 2)


def test_the_limits_table_is_read_strictly_from_the_config_file(tmp_path: Path) -> None:
    """The issue's example reads into the table; `[limits]` with [gpuallocd] works too."""
    path = tmp_path / "c.toml"
    path.write_text(
        'admin_groups = ["gpuadmin"]\n[limits]\nmax_gpus = 4\nmax_ttl_seconds = 86400\n'
        "max_waiting = 2\nmax_gpu_hours_per_day = 48\n"
        "[limits.group.students]\nmax_gpus = 2\n[limits.user.alice]\nmax_gpus = 8\n"
    )
    config = load_config(path, environ={})
    assert config.admin_groups == ("gpuadmin",)
    assert config.limits == LimitsTable(
        default=Limits(max_gpus=4, max_ttl_seconds=86400, max_waiting=2, max_gpu_hours_per_day=48),
        groups={"students": Limits(max_gpus=2)},
        users={"alice": Limits(max_gpus=8)},
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[limits]\nmax_gpu = 4\n", "unknown key 'max_gpu'"),
        ('[limits]\nmax_gpus = "4"\n', "max_gpus must be a number"),
        ("[limits]\nmax_waiting = 1.5\n", "max_waiting must be an integer"),
        ("[limits]\nmax_gpus = -1\n", "max_gpus must be at least 0"),
        ("[limits]\nmax_ttl_seconds = 0\n", "max_ttl_seconds must be positive"),
        ("[limits.user.alice]\nmax_gpus = true\n", "[limits.user.alice]: max_gpus must be"),
        ("[limits.group.x]\ngroup = 1\n", "[limits.group.x]: unknown key 'group'"),
        ("[limits]\ngroup = 3\n", "limits.group must be a table"),
        ("limits = 3\n", "limits must be a table"),
        ('admin_groups = "gpuadmin"\n', "admin_groups must be a list of strings"),
        ("idle_reclaim_minutes = 0\n", "idle_reclaim_minutes must be positive"),
        ("history_retention_days = -1\n", "history_retention_days must be positive"),
    ],
)
def test_a_bad_limits_table_stops_the_daemon_naming_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    """Any unknown key, wrong type or value out of range is a ConfigError that says which."""
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(path, environ={})
    assert message in error.value.message


def lease(lease_id: str, *uuids: str) -> Lease:
    gpus = tuple(LeasedGpu(u, i) for i, u in enumerate(uuids))
    return Lease(lease_id, gpus, 1000, "ana", None, None, "simple", 0.0, 1e12)


IDLE = LiveState(utilization_percent=0.0)
BUSY = LiveState(utilization_percent=35.0)


def test_a_lease_is_idle_only_while_all_its_gpus_show_no_use() -> None:
    """Idle time starts at the first idle sample, stops at any use, and unknown use is not idle."""
    tracker = IdleTracker(IdleRules(reclaim_seconds=600, grace_seconds=60))
    live = {"a": IDLE, "b": IDLE, "c": LiveState(), "d": IDLE}
    held = [lease("one", "a", "b"), lease("two", "c"), lease("three", "d")]
    tracker.observe(held, live.__getitem__, now=100)
    tracker.observe(held, live.__getitem__, now=200)
    assert (tracker.idle_since("one"), tracker.idle_since("two")) == (100, None)
    live["d"] = LiveState(utilization_percent=0.0, processes=(GpuProcess(7),))
    live["b"] = BUSY
    tracker.observe(held, live.__getitem__, now=300)
    assert (tracker.idle_since("one"), tracker.idle_since("three")) == (None, None)


def victim_id(tracker: IdleTracker, held: list[Lease], wanted: set[str], now: float) -> str:
    victim = tracker.victim(held, frozenset(wanted), now)
    return victim.id if victim else ""


def test_only_a_lease_past_its_grace_that_holds_a_wanted_gpu_is_reclaimed() -> None:
    """The notice comes after reclaim_seconds; the victim is the longest idle one past the
    grace that holds a GPU someone waits for, and nobody while nobody waits."""
    tracker = IdleTracker(IdleRules(reclaim_seconds=600, grace_seconds=60))
    held = [lease("early", "a"), lease("late", "b")]
    tracker.observe(held[:1], lambda _u: IDLE, now=0)
    tracker.observe(held, lambda _u: IDLE, now=100)
    assert tracker.notice("early", now=599) is None
    notice = tracker.notice("early", now=600)
    assert notice is not None and notice.revocable_at == 660
    assert tracker.victim(held, frozenset(), now=10_000) is None
    assert tracker.victim(held, frozenset({"a", "b"}), now=659) is None
    assert victim_id(tracker, held, {"a", "b"}, now=700) == "early"
    assert tracker.victim(held, frozenset({"b"}), now=700) is None
    assert victim_id(tracker, held, {"b"}, now=760) == "late"


def test_usage_counts_the_part_of_each_lease_inside_the_window() -> None:
    """GPU-hours are clipped to the window; leases and waiting count where granted inside it."""
    spans = [
        LeaseSpan(1, "ana", 2, created_at=0, ended_at=7200, waited_seconds=30),
        LeaseSpan(1, "ana", 1, created_at=5400, ended_at=None, waited_seconds=60),
        LeaseSpan(2, "bo", 4, created_at=9000, ended_at=9900),
    ]
    (ana,) = [u for u in usage_by_user(spans, since=3600, until=9000) if u.user == "ana"]
    assert (ana.gpu_hours, ana.leases, ana.waiting_seconds) == (2 * 1 + 1 * 1, 1, 60)
    assert [u.user for u in usage_by_user(spans, 3600, 9000)] == ["ana", "bo"]


@pytest.mark.parametrize(
    ("text", "ago"), [("7d", 7 * 86400), ("12h", 43200), ("30m", 1800), ("2w", 14 * 86400)]
)
def test_since_reads_durations_ago(text: str, ago: float) -> None:
    """`usage --since 7d` means seven days before now."""
    assert parse_since(text, now=1e9) == 1e9 - ago


# The oracle the ledger's SQL sum is held to (tests/test_accounting.py): spans added up in Python.
def usage_by_user(spans: Iterable[LeaseSpan], since: float, until: float) -> list[UserUsage]:
    """Each user's use inside [since, until], most GPU-hours first.

    A lease counts as granted (and its waiting time counts) where it was created inside the
    window; its GPU-hours count for the part of its life inside the window.
    """
    totals: dict[int, list[Any]] = {}
    for span in spans:
        entry = totals.setdefault(span.owner_uid, [span.owner_name, 0.0, 0, 0.0])
        entry[1] += span.gpus * span.seconds_within(since, until)
        if since <= span.created_at < until:
            entry[2] += 1
            entry[3] += span.waited_seconds
    found = [
        UserUsage(uid, name, seconds / 3600.0, leases, waited)
        for uid, (name, seconds, leases, waited) in totals.items()
    ]
    return sorted(found, key=lambda u: (-u.gpu_hours, u.user))


def test_each_limit_is_named_once() -> None:
    """The config's keys, `limits`' rows and the use they are held against come from the
    fields of `Limits`: a new limit field is a new key everywhere, with nothing else to edit."""
    from dataclasses import fields

    from gpuallocd.allocator.site.limits import LIMIT_NAMES

    declared = [f.name for f in fields(Limits) if f.metadata.get("limit")]
    assert list(LIMIT_NAMES) == declared
    table = LimitsTable(default=Limits(**dict.fromkeys(declared, 1)))
    assert set(table.applied("dave", []).values) == set(declared)
    assert set(Usage().to_json()) == set(declared)
