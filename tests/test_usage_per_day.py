"""GPU-hours per user per day: one read in the daemon, one request from `usage --plot`, the
same sums as the dashboard's charts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from gpulease import Client
from gpulease.errors import InvalidRequest

from gpuallocd.charts import daily_bars
from gpuallocd.cli.looking.usage_plot import _days
from gpuallocd.dashboard.source import read_charts
from gpuallocd.ledger import LedgerReader
from tests.harness import HandClock, ThreadDaemon

HOUR = 3600.0
DAY = 24 * HOUR


class CountingClient(Client):
    """The real client, counting the requests it sends."""

    requests = 0

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        self.requests += 1
        return super().request(method, path, body, **kwargs)


def two_days_of_use(
    start_daemon: Callable[..., ThreadDaemon],
) -> tuple[ThreadDaemon, HandClock]:
    """Root holds 2 GPUs for 5 h, then, a day later, 1 GPU for 3 h (13 GPU-hours)."""
    clock = HandClock(time.time() - 2 * DAY)
    daemon = start_daemon(default_policy="simple", clock=clock, max_ttl_seconds=DAY)
    with daemon.client() as client:
        first = client.allocate(2, ttl=6 * HOUR)
        clock.step(5 * HOUR)
        client.free(first.id)
        clock.step(DAY)
        second = client.allocate(1, ttl=6 * HOUR)
        clock.step(3 * HOUR)
        client.free(second.id)
    return daemon, clock


def test_usage_per_day_is_one_request_with_the_dashboards_sums(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """A 30-day plot asks the daemon once (it asked once a day), and each day's GPU-hours are
    what the dashboard's chart shows for that day."""
    daemon, clock = two_days_of_use(start_daemon)
    now = clock()
    with CountingClient(str(daemon.paths.socket)) as client:
        groups = _days(client, now - 30 * DAY, now, None)
        assert client.requests == 1
    reader = LedgerReader(daemon.paths.state_dir / "ledger.sqlite3")
    try:
        data = read_charts(reader, now)
        shown = daily_bars(data.bounds, data.hours)
    finally:
        reader.close()
    plotted = {g.label: g.values for g in groups if g.values}
    charted = {g.label: g.values for g in shown if g.values}
    assert plotted.keys() == charted.keys()
    for label, values in plotted.items():
        assert values == pytest.approx(charted[label])
    assert sum(sum(v.values()) for v in plotted.values()) == pytest.approx(13.0, abs=0.02)


def test_per_day_usage_refuses_an_unknown_period(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """`per` takes `day` only: anything else is invalid_request, naming the field."""
    daemon = start_daemon()
    with daemon.client() as client:
        with pytest.raises(InvalidRequest) as refused:
            client.request("GET", "/v1/usage?per=week")
        assert refused.value.details["field"] == "per"


@pytest.mark.parametrize(
    "query",
    [
        "per=day&since=1e308",
        "per=day&since=-1e308",
        "per=day&user=%00%1b",
        "user=%00",
    ],
)
def test_hostile_usage_windows_and_names_change_nothing_and_break_nothing(
    start_daemon: Callable[..., ThreadDaemon], query: str
) -> None:
    """A window far in the past or the future, or a user name with a NUL byte, is answered
    (days the calendar can name, nobody's figures) and never fails the daemon."""
    daemon = start_daemon()
    with daemon.client() as client:
        report = client.request("GET", f"/v1/usage?{query}")
    assert report["fair_share"] == {} or "user" not in query
    assert len(report.get("days", [])) <= 367


def test_a_per_day_window_past_the_calendar_is_refused(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """`until` beyond the year 9999 has no local days to name: invalid_request."""
    daemon = start_daemon()
    with daemon.client() as client, pytest.raises(InvalidRequest) as refused:
        client.request("GET", "/v1/usage?per=day&until=1e308")
    assert refused.value.details["field"] == "until"
