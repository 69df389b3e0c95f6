"""Each user's running totals (ledger/totals.py): equal to the history added up anew, whatever
the order of events; rebuilt the same; a grant's budget read and its writes the same work
whatever the history; purged without losing a budget's month."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuallocd.allocator.site.budgets import TotalsUse, use_in_window
from gpuallocd.allocator.site.limits import Limits, LimitsTable
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.site.rules import SiteRules
from gpuallocd.ledger import Ledger
from gpuallocd.ledger.totals import whole_minute
from gpuallocd.model import Caller, Gpu, LeaseState
from gpuallocd.model.energy import EnergyUse
from gpuallocd.policies.fair_share import decayed_from_pieces, decayed_gpu_hours, piece_bounds
from tests.ledger_history import a_lease, held, open_ledger

DAY = 86400.0
START = 1_700_000_040.0  # a whole minute


def driver_of(ledger: Ledger) -> sqlite3.Connection:
    """The sqlite3 connection the ledger writes and reads on (to count its work)."""
    return cast(sqlite3.Connection, ledger._conn.connection.driver_connection)


def sqlite_steps(ledger: Ledger, work: Callable[[], object]) -> int:
    """SQLite's virtual-machine steps of `work` on the ledger's connection (no clock)."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    db = driver_of(ledger)
    db.set_progress_handler(count, 1)
    try:
        work()
    finally:
        db.set_progress_handler(None, 1)
    return steps


# A history: each step grants (and maybe later ends) a lease, or records energy, at a time
# that may go back (the wall clock stepped back; an expiry recorded at its due time).
times = st.floats(min_value=0.0, max_value=3 * DAY, allow_nan=False).map(lambda t: START + t)
grant = st.tuples(
    st.just("lease"),
    st.integers(1, 3),  # uid
    times,  # start
    st.one_of(st.none(), st.floats(min_value=-600.0, max_value=DAY)),  # held for (None: active)
    st.integers(1, 3),  # GPUs
    st.floats(min_value=0.0, max_value=7200.0),  # waited
)
reading = st.tuples(
    st.just("energy"),
    st.integers(1, 3),
    times,
    st.floats(min_value=0.0, max_value=1e6),
    st.booleans(),  # under a lease (else unleased use)
    st.booleans(),  # an estimate
)
# At most 10 leases of 3 GPUs at once: the 32 GPUs hold them all while none has ended.
history = st.tuples(
    st.lists(grant, min_size=1, max_size=10), st.lists(reading, max_size=15)
).flatmap(lambda parts: st.permutations(parts[0] + parts[1]))


def write(ledger: Ledger, gpus: tuple[Gpu, ...], steps: Sequence[tuple[object, ...]]) -> None:
    """Write `steps` in order; ends come after every step that followed their grant."""
    ends = []
    granted = 0
    for step in steps:
        if step[0] == "lease":
            _, uid, start, length, count, waited = step
            first = 3 * granted  # its own GPUs: every lease is active until the ends below
            granted += 1
            lease = a_lease(gpus, uid, start, count=count, first=first, waited=waited)  # type: ignore[arg-type]
            ledger.grant(lease, lease.owner_uid)
            if length is not None:
                ends.append(lease.ended(LeaseState.EXPIRED, start + length))  # type: ignore[operator]
        else:
            _, uid, at, joules, leased, estimate = step
            use = EnergyUse("x" if leased else None, uid, f"u{uid}", at, joules, estimate, 30.0)  # type: ignore[arg-type]
            ledger.record_energy([use])
    for ended in reversed(ends):  # out of order, and long after their time
        ledger.end([ended], 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=history, windows=st.lists(st.tuples(times, times), min_size=1, max_size=4))
def test_running_totals_equal_the_history_added_up_anew(
    tmp_path_factory: pytest.TempPathFactory,
    steps: Sequence[tuple[object, ...]],
    windows: list[tuple[float, float]],
) -> None:
    """Over any window of whole minutes, each user's GPU-seconds, leases, waiting and energy
    from the running totals are those of the leases and readings added up anew, whatever
    order the events came in; rebuilt from the history, they answer the same."""
    path = tmp_path_factory.mktemp("totals") / "ledger.sqlite3"
    ledger, gpus = open_ledger(path)
    try:
        write(ledger, gpus, steps)
        bounds = [tuple(sorted(w)) for w in windows] + [(START - DAY, START + 5 * DAY)]
        for since, until in bounds:
            assert ledger.totals_disagree(since, until) == []
        before = {
            (uid, m): ledger.totals_at(uid, m)
            for uid in (1, 2, 3)
            for m in (whole_minute(t) for pair in bounds for t in pair)
        }
        ledger.rebuild_totals()
        for (uid, m), totals in before.items():
            again = ledger.totals_at(uid, m)
            assert abs(again.gpu_seconds - totals.gpu_seconds) < 1e-3
            assert (again.leases, again.estimates) == (totals.leases, totals.estimates)
            assert abs(again.all_joules - totals.all_joules) < 1e-3
    finally:
        ledger.close()


def test_a_window_inside_a_minute_is_off_by_at_most_that_minute(tmp_path: Path) -> None:
    """A window starting inside a minute in which GPUs were granted counts them from the
    minute's end: at most 60 s of each, never more (docs/accounting.md)."""
    ledger, gpus = open_ledger(tmp_path / "l.sqlite3")
    try:
        held(ledger, gpus, 1, START + 10.0, START + 3600.0, count=4)
        used = ledger.totals_at(1, START + 3600.0).since(ledger.totals_at(1, START + 30.0))
        exact = 4 * (3600.0 - 30.0)
        assert abs(used.gpu_seconds - exact) <= 4 * 60.0
        whole = ledger.totals_at(1, START + 3600.0).since(ledger.totals_at(1, START))
        assert whole.gpu_seconds == 4 * (3600.0 - 10.0)
    finally:
        ledger.close()


def _vm_steps(ledger: Ledger, quota: Quota, caller: Caller, gpus: tuple[Gpu, ...]) -> int:
    """SQLite's virtual-machine steps of one budgeted grant and its end (its check included)."""

    def grant_and_end() -> None:
        now = quota.budget_use(caller.uid).now
        quota.check_grant(caller, [], gpus=1)
        lease = a_lease(gpus, caller.uid, now, first=20)
        ledger.grant(lease, caller.uid)
        ledger.end([lease.ended(LeaseState.FREED, now + 1.0)], caller.uid)

    return sqlite_steps(ledger, grant_and_end)


def test_a_budgeted_grant_does_the_same_work_whatever_the_history(tmp_path: Path) -> None:
    """A user under every budget with 100 or 4,000 leases in the month: their grant, its
    budget check and its end take the same SQLite work (the check reads two or three
    points of the totals, not the month's leases), and another user's too."""
    table = LimitsTable(
        default=Limits(
            max_gpu_hours_per_day=1e6,
            max_gpu_hours_per_week=1e6,
            max_gpu_hours_per_month=1e6,
            max_kwh_per_day=1e6,
            max_kwh_per_month=1e6,
        )
    )
    counted = []
    for size in (100, 4000):
        now = START + 30 * DAY
        ledger, gpus = open_ledger(tmp_path / f"{size}.sqlite3")
        step = 29 * DAY / size
        with ledger.unit_of_work():
            for n in range(size):
                at = START + n * step
                held(ledger, gpus, 7, at, at + 30.0, first=n % 16)
                ledger.record_energy([EnergyUse(None, 7, "u7", at + 30.0, 5.0, False, 30.0)])
        quota = Quota(ledger, lambda now=now: now, SiteRules(limits=table))
        hostile = _vm_steps(ledger, quota, Caller(7, 7, 1, "u7"), gpus)
        other = _vm_steps(ledger, quota, Caller(8, 8, 1, "u8"), gpus)
        counted.append((hostile, other))
        ledger.close()
    (small, other_small), (large, other_large) = counted
    assert large <= small * 1.1 + 50, counted
    assert other_large <= other_small * 1.1 + 50, counted


def test_a_minute_of_many_tiny_leases_is_one_mark(tmp_path: Path) -> None:
    """1,000 leases granted and freed within one minute leave one mark for their owner, and
    the totals count all of them."""
    ledger, gpus = open_ledger(tmp_path / "l.sqlite3")
    try:
        with ledger.unit_of_work():
            for n in range(1000):
                at = START + n * 0.05
                held(ledger, gpus, 9, at, at + 0.01)
        (marks,) = driver_of(ledger).execute("SELECT count(*) FROM use_marks").fetchone()
        assert marks == 1
        used = ledger.totals_at(9, START + 120.0)
        assert used.leases == 1000
        assert abs(used.gpu_seconds - 10.0) < 1e-4  # the times' own rounding at 1.7e9 s
    finally:
        ledger.close()


def test_a_clock_stepped_back_moves_at_most_a_mark_a_minute(tmp_path: Path) -> None:
    """After the wall clock steps back an hour, a grant dated before the owner's later marks
    moves at most one mark per minute since, not one per lease, and the totals stay those
    of the history."""
    ledger, gpus = open_ledger(tmp_path / "l.sqlite3")
    try:
        with ledger.unit_of_work():
            for n in range(3000):  # an hour of leases, 50 a minute
                at = START + n * 1.2
                held(ledger, gpus, 5, at, at + 0.5)
        db = driver_of(ledger)
        (marks,) = db.execute("SELECT count(*) FROM use_marks").fetchone()
        assert marks <= 61
        before = db.total_changes
        held(ledger, gpus, 5, START + 10.0, START + 20.0, first=1)  # an hour back
        assert db.total_changes - before <= 2 * (marks + 2) + 12  # the lease's rows and marks
        assert ledger.totals_disagree(START - 60, START + 2 * 3600) == []
    finally:
        ledger.close()


def test_a_purge_keeps_a_months_totals_however_short_the_retention(tmp_path: Path) -> None:
    """Marks older than the cutoff go, each user's last one before it stays: use after the
    cutoff reads as before, and a month's budget still counts leases already purged."""
    ledger, gpus = open_ledger(tmp_path / "l.sqlite3")
    try:
        for day in range(20):
            held(ledger, gpus, 4, START + day * DAY, START + day * DAY + 3600.0)
        now = START + 20 * DAY
        month = TotalsUse(lambda when: ledger.totals_at(4, when), now)
        assert use_in_window(month, "gpu_hours", 30 * DAY) == 20.0
        cutoff = START + 15 * DAY + 10.0
        recent = ledger.totals_at(4, now).since(ledger.totals_at(4, cutoff))
        while ledger.purge_before(START + 10 * DAY, 5):  # a retention of 10 days
            pass
        month = TotalsUse(lambda when: ledger.totals_at(4, when), now)
        assert use_in_window(month, "gpu_hours", 30 * DAY) == 20.0  # the marks stayed
        while ledger.purge_totals_before(cutoff, 3):
            pass
        after = ledger.totals_at(4, now).since(ledger.totals_at(4, cutoff))
        assert (after.gpu_seconds, after.leases) == (recent.gpu_seconds, recent.leases)
        (marks,) = driver_of(ledger).execute("SELECT count(*) FROM use_marks").fetchone()
        assert marks == 2 * 5 + 1  # days 15..19 (grant, end), and the last of day 14
        everything = ledger.totals_at(4, now).since(ledger.totals_at(4, START))
        assert everything == after  # what went before the cutoff counts nothing
    finally:
        ledger.close()


def test_a_ledger_of_an_older_version_gets_its_totals_from_its_history(tmp_path: Path) -> None:
    """A ledger written before the running totals existed opens with them built from its
    leases and readings: its users' use reads as the history says."""
    path = tmp_path / "l.sqlite3"
    ledger, gpus = open_ledger(path)
    held(ledger, gpus, 3, START, START + 7200.0, count=2)
    held(ledger, gpus, 3, START + 100.0, None, first=4)
    ledger.record_energy([EnergyUse("x", 3, "u3", START + 7200.0, 3.6e6, True)])
    ledger.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE use_marks")
    conn.execute("ALTER TABLE leases DROP COLUMN follow_work")  # what version 7 added
    conn.execute("ALTER TABLE lease_gpus DROP COLUMN cap_mw")  # what version 9 added
    conn.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    ledger = Ledger(path)
    try:
        used = ledger.totals_at(3, START + 7300.0).since(ledger.totals_at(3, START))
        assert used.gpu_seconds == 2 * 7200.0 + 7200.0
        assert (used.leases, used.estimates, used.joules) == (2, 1, 3.6e6)
        assert ledger.totals_disagree(START - 60, START + DAY) == []
    finally:
        ledger.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    leases=st.lists(
        st.tuples(st.integers(1, 3), times, st.floats(min_value=1.0, max_value=2 * DAY)),
        min_size=1,
        max_size=12,
    ),
    half_life_hours=st.sampled_from([1.0, 24.0, 168.0]),
)
def test_fair_shares_decayed_use_reads_the_same_from_the_totals(
    tmp_path_factory: pytest.TempPathFactory,
    leases: list[tuple[int, float, float]],
    half_life_hours: float,
) -> None:
    """Decayed GPU-hours weighed over the totals' pieces of the horizon (a fixed number of
    points per user, whatever the history) are fair share's figure from every lease, within
    half the decay's spread inside a piece: 0.55% of each GPU-hour used in the horizon."""
    path = tmp_path_factory.mktemp("decayed") / "ledger.sqlite3"
    ledger, gpus = open_ledger(path)
    now = START + 4 * DAY
    try:
        for n, (uid, start, length) in enumerate(leases):
            held(
                ledger, gpus, uid, start, start + length if start + length < now else None, first=n
            )
        bounds = piece_bounds(now, half_life_hours)
        pieces = [
            {used.name or "": used.gpu_seconds for used in piece.values()}
            for piece in ledger.totals_between(bounds)
        ]
        from_totals = decayed_from_pieces(bounds, pieces, now, half_life_hours)
        spans = [  # inside the horizon: what is older is left out of both
            replace(span, created_at=max(span.created_at, bounds[0]))
            for span in ledger.lease_spans(bounds[0], now)
        ]
        from_leases = decayed_gpu_hours(spans, now, half_life_hours)
        used: dict[str, float] = {}  # undecayed: each GPU-hour weighs 1
        for span in spans:
            end = now if span.ended_at is None else min(span.ended_at, now)
            hours = span.gpus * max(0.0, end - span.created_at) / 3600.0
            used[span.owner_name] = used.get(span.owner_name, 0.0) + hours
        for account, hours in from_leases.items():
            assert abs(from_totals.get(account, 0.0) - hours) <= 0.0055 * used[account] + 1e-12
    finally:
        ledger.close()
