"""Hostile input against notifications: webhooks aimed at the daemon's own ports, labels that
would forge a mail header or a desktop link, huge labels, a flood of one user's notices."""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from email import message_from_bytes, policy
from pathlib import Path

import pytest
from gpulease import InvalidRequest

from gpuallocd.notify.channels import Channel, ChannelError, checked_address, checked_url
from gpuallocd.notify.deliver import Senders, deliver
from gpuallocd.notify.http_send import DeliveryError, Retry, forbidden_by
from gpuallocd.notify.mail import message_of
from tests.harness import HandClock, ThreadDaemon, wait_for
from tests.notify_desktop import Desktop, desktop  # noqa: F401 - fixture
from tests.notify_sinks import WebhookSink, webhook_sink  # noqa: F401 - fixture


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_webhooks_at_the_daemons_own_ports_are_refused_whatever_name_points_there(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """The metrics and dashboard ports, by 127.0.0.1, localhost or another loopback
    address: refused before anything is sent; other schemes are refused when added."""
    metrics, dashboard = _free_port(), _free_port()
    daemon = start_daemon(
        default_policy="simple",
        metrics_listen=f"127.0.0.1:{metrics}",
        dashboard_listen=f"127.0.0.1:{dashboard}",
    )
    with daemon.client() as client:
        listens = [p["listen"] for p in client.health()["ports"]]
    forbidden = forbidden_by(listens)
    senders = Senders(forbidden=forbidden, retry=Retry(attempts=1, timeout=2))
    notice = {"seq": 1, "kind": "ended", "key": "k", "title": "t", "body": "b", "at": 0}
    for url in (
        f"http://127.0.0.1:{metrics}/metrics",
        f"http://localhost:{dashboard}/",
        f"http://127.0.0.2:{metrics}/metrics",
        f"https://[::ffff:127.0.0.1]:{metrics}/",
    ):
        with pytest.raises(DeliveryError, match="gpuallocd's own ports"):
            deliver(Channel("webhook", url), notice, senders)
    for url in ("unix:///run/gpuallocd/gpuallocd.sock", "file:///etc/shadow", "http://h/\r\nX: y"):
        with pytest.raises(ChannelError):
            checked_url(url)


def test_a_label_cannot_forge_a_mail_header_or_a_second_recipient(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """The daemon refuses a label with a line end; a title that had one anyway is one line
    in the Subject, and no Bcc appears; an address with a comma or a name is refused."""
    daemon = start_daemon(default_policy="simple")
    with daemon.client() as client, pytest.raises(InvalidRequest):
        client.allocate(1, label="x\r\nBcc: mallory@example.org")
    notice = {
        "title": "lease 1 (x\r\nBcc: mallory@example.org) expired",
        "body": "b\r\n.\r\n",
        "key": "k\nX-Evil: 1",
        "at": 0,
    }
    raw = message_of("alice@example.org", notice).as_bytes()
    parsed = message_from_bytes(raw, policy=policy.default)
    assert parsed["Bcc"] is None and parsed["X-Evil"] is None
    assert parsed.get_all("To") == ["alice@example.org"]
    assert "mallory" in str(parsed["Subject"])  # shown, on its one line
    for address in ("a@b.c, mallory@x.org", "Alice <a@b.c>", "a@b.c\nBcc: m@x.org", "a b@c.d"):
        with pytest.raises(ChannelError):
            checked_address(address)


def test_a_huge_or_marked_up_label_reaches_the_desktop_cut_short_and_inert(
    start_daemon: Callable[..., ThreadDaemon],
    desktop: Desktop,  # noqa: F811
) -> None:
    """A label at the API's length limit with markup (bidi overrides are refused): it shows
    80 characters of it, escaped; the desktop gets a summary of at most 150 characters and
    a body whose markup is text."""
    os.environ["DBUS_SESSION_BUS_ADDRESS"] = desktop.address
    wall = HandClock(1_800_000_000.0)
    daemon = start_daemon(default_policy="simple", clock=wall)
    label = "<a href='http://evil'>x</a>" + "A" * 400
    with daemon.client() as client:
        with pytest.raises(InvalidRequest):
            client.allocate(1, label="\u202eevil")  # a bidi override never gets in
        lease = client.allocate(1, ttl=30, label=label[:200])
        wall.step(31)
        wait_for(lambda: client.notifications()["notices"] != [], 20, what="the end notice")
        (notice,) = client.notifications()["notices"]
    assert len(notice["data"]["label"]) == 80
    deliver(Channel("desktop"), {**notice, "body": "<b>bold</b> & <a href='x'>link</a>"}, Senders())
    (shown,) = desktop.notifications()
    assert len(shown["summary"]) <= 150 and lease.id in shown["summary"]
    assert shown["body"] == "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;a href='x'&gt;link&lt;/a&gt;"


def test_a_flood_of_one_users_notices_wakes_no_one_else_and_reads_by_index(
    start_daemon: Callable[..., ThreadDaemon], paths: object
) -> None:
    """200 of root's leases end with notices while another reader's long poll waits: that
    poll is not answered by them; the feed is read through the (uid, seq) index, never a
    scan of the table."""
    wall = HandClock(1_800_000_000.0)
    daemon = start_daemon(default_policy="simple", clock=wall)
    answered: list[dict[str, object]] = []
    desk = daemon._daemon._facade_in_service.notices  # type: ignore[union-attr]

    def other_user_polls() -> None:
        import asyncio

        future = asyncio.run_coroutine_threadsafe(
            desk.read(4242, 0, 3),
            daemon._loop,  # type: ignore[arg-type]
        )
        answered.append(future.result(30))

    with daemon.client() as client:
        for _ in range(50):
            for lease in [client.allocate(1, ttl=10) for _ in range(4)]:
                client.revoke(lease.id, reason="flood")
        poller = threading.Thread(target=other_user_polls)
        poller.start()
        poller.join(30)
        assert len(client.notifications(limit=500)["notices"]) == 200
    assert answered and answered[0]["notices"] == []
    ledger = Path(daemon.config.ledger_path)
    with closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as db, db:
        plan = db.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM notices WHERE uid = ? AND seq > ? "
            "ORDER BY seq LIMIT 100",
            (1000, 0),
        ).fetchall()
    assert any("notices_by_uid" in row[-1] for row in plan), plan
    assert not any(row[-1].startswith("SCAN notices") for row in plan), plan
