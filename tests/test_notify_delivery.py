"""The notifier delivers a user's feed to real receivers: a desktop's notification server on a
private session bus, a webhook that checks the signature, mail through a real sendmail."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuallocd.notify.agent import Agent
from gpuallocd.notify.channels import Channel
from gpuallocd.notify.deliver import Senders
from gpuallocd.notify.http_send import Retry
from gpuallocd.notify.signing import new_secret
from gpuallocd.notify.state import AlreadyRunning, NotifyState
from gpuallocd.notify.user_config import NotifyConfig
from tests.harness import HandClock, ThreadDaemon, wait_for
from tests.notify_desktop import Desktop, desktop  # noqa: F401 - fixture
from tests.notify_sinks import (  # noqa: F401 - fixtures
    MailSink,
    WebhookSink,
    mail_sink,
    sendmail_or_skip,
    webhook_sink,
    write_msmtprc,
)

START = 1_800_000_000.0


@pytest.fixture
def clocks() -> tuple[HandClock, HandClock]:
    return HandClock(START), HandClock(1000.0)


@pytest.fixture
def clocked(
    start_daemon: Callable[..., ThreadDaemon], clocks: tuple[HandClock, HandClock]
) -> ThreadDaemon:
    wall, boot = clocks
    return start_daemon(default_policy="simple", clock=wall, monotonic=boot)


def _step(clocks: tuple[HandClock, HandClock], seconds: float) -> None:
    for clock in clocks:
        clock.step(seconds)


class Notifier:
    """The user's notifier in this process: its file, its state, its sleeps recorded."""

    def __init__(self, daemon: ThreadDaemon, home: Path, channels: list[Channel]) -> None:
        self.config = NotifyConfig(channels=tuple(channels), path=home / "notify.toml")
        self.config.save()
        self.state_path = home / "state.json"
        self.daemon = daemon
        self.slept: list[float] = []

    def agent(self, retry: Retry | None = None, clock: Callable[[], float] | None = None) -> Agent:
        senders = Senders(retry=retry or Retry(), sleep=self.slept.append)
        return Agent(
            self.daemon.client,
            "test",
            config_path=self.config.path,
            state=NotifyState.load(self.state_path),
            senders=senders,
            **({"clock": clock} if clock else {}),
        )

    def once(self, **options: object) -> int:
        return self.agent(**options).run(once=True)  # type: ignore[arg-type]


def _queue_and_grant(daemon: ThreadDaemon, clocks: tuple[HandClock, HandClock]) -> str:
    """Root holds every GPU, a second request waits two minutes, then gets one."""
    got: list[str] = []

    def wait_for_one() -> None:
        with daemon.client() as waiting:
            got.append(waiting.allocate(1, ttl=3600, wait=True, label="train").id)

    with daemon.client() as client:
        blocker = client.allocate(4, ttl=7200)
        waiter = threading.Thread(target=wait_for_one)
        waiter.start()
        wait_for(lambda: len(client.queue()) == 1, 10, what="the request waits")
        _step(clocks, 120)
        client.free(blocker.id)
        waiter.join(10)
    return got[0]


@pytest.fixture
def home(short_dir: Path) -> Iterator[Path]:
    path = short_dir / "home"
    path.mkdir(mode=0o700)
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(path)
    yield path
    if saved is not None:
        os.environ["HOME"] = saved


def test_a_grant_after_a_wait_and_its_warning_reach_desktop_webhook_and_mail(
    clocked: ThreadDaemon,
    clocks: tuple[HandClock, HandClock],
    home: Path,
    desktop: Desktop,  # noqa: F811
    webhook_sink: WebhookSink,  # noqa: F811
    mail_sink: MailSink,  # noqa: F811
) -> None:
    """Granted after a wait, then 15 minutes before it expires: each on all three channels,
    the webhook's signature checked, the mail through sendmail."""
    sendmail_or_skip()
    write_msmtprc(home, mail_sink.port)
    os.environ["DBUS_SESSION_BUS_ADDRESS"] = desktop.address
    webhook_sink.secret = new_secret()
    notifier = Notifier(
        clocked,
        home,
        [
            Channel("desktop"),
            Channel("webhook", webhook_sink.url, webhook_sink.secret),
            Channel("mail", "alice@example.org"),
        ],
    )
    lease_id = _queue_and_grant(clocked, clocks)
    assert notifier.once() == 1
    _step(clocks, 3600 - 900)
    with clocked.client() as client:
        client.notifications(after=1, wait=30)
    assert notifier.once() == 1
    summaries = [n["summary"] for n in desktop.notifications()]
    assert summaries[0].startswith("GPU ") and f"lease {lease_id} (train)" in summaries[0]
    assert "expires in 15m" in summaries[1]
    assert webhook_sink.kinds() == ["granted", "ending"]
    assert all(d.signed for d in webhook_sink.deliveries)
    assert webhook_sink.deliveries[1].json["data"]["threshold_seconds"] == 900
    assert len(mail_sink.messages) == 2
    assert mail_sink.messages[1]["To"] == "alice@example.org"
    assert "expires in 15m" in mail_sink.subjects()[1]


def test_a_failing_webhook_is_retried_with_growing_waits_and_signed_each_time(
    clocked: ThreadDaemon,
    clocks: tuple[HandClock, HandClock],
    home: Path,
    webhook_sink: WebhookSink,  # noqa: F811
) -> None:
    """Two 503s, then the delivery: waits of 1 s then 2 s, the signature good on the last."""
    webhook_sink.secret, webhook_sink.fail_first = new_secret(), 2
    notifier = Notifier(clocked, home, [Channel("webhook", webhook_sink.url, webhook_sink.secret)])
    _queue_and_grant(clocked, clocks)
    notifier.once()
    assert webhook_sink.attempts == 3
    assert notifier.slept == [1.0, 2.0]
    assert [d.signed for d in webhook_sink.deliveries] == [True]


def test_a_webhook_that_never_answers_is_given_up_and_reported(
    clocked: ThreadDaemon,
    clocks: tuple[HandClock, HandClock],
    home: Path,
    webhook_sink: WebhookSink,  # noqa: F811
) -> None:
    """A receiver that hangs costs each attempt its timeout; the failure is reported to the
    daemon (kind and error, no URL) and shown by `notify list`'s state."""
    webhook_sink.hang = True
    channel = Channel("webhook", webhook_sink.url, new_secret())
    notifier = Notifier(clocked, home, [channel])
    _queue_and_grant(clocked, clocks)
    notifier.once(retry=Retry(attempts=2, timeout=0.5))
    with clocked.client() as client:
        (report,) = client.delivery_reports()
    assert (report["channel"], report["kind"], report["ok"]) == (channel.id, "webhook", False)
    assert report["error"] == "no answer within 0.5 s (gave up after 2 attempts)"
    assert "127.0.0.1" not in str(report)
    state = NotifyState.load(notifier.state_path)
    assert state.channels[channel.id]["ok"] is False


def test_a_notifier_away_gets_what_it_missed_once_and_stale_ones_summed_up(
    clocked: ThreadDaemon,
    clocks: tuple[HandClock, HandClock],
    home: Path,
    webhook_sink: WebhookSink,  # noqa: F811
) -> None:
    """Stopped, the notifier misses nothing: started again it delivers what came meanwhile,
    never what it delivered before; notices older than the stale age come as one summary."""
    notifier = Notifier(clocked, home, [Channel("webhook", webhook_sink.url)])
    first = _queue_and_grant(clocked, clocks)
    assert notifier.once() == 1
    assert notifier.once() == 0  # nothing new: nothing twice
    with clocked.client() as client:
        client.free(first)  # the owner's own free: nothing to tell
    _queue_and_grant(clocked, clocks)
    _step(clocks, 7200)  # the second grant is two hours old when the notifier returns
    notifier.once(clock=clocks[0])
    kinds = webhook_sink.kinds()
    assert kinds[0] == "granted"
    assert "stale" in kinds
    summary = webhook_sink.deliveries[kinds.index("stale")].json
    assert "granted" in summary["body"]


def test_a_second_notifier_of_the_same_user_is_refused(clocked: ThreadDaemon, home: Path) -> None:
    """Two notifiers would deliver everything twice: the second one stops at once."""
    notifier = Notifier(clocked, home, [])
    state = NotifyState.load(notifier.state_path)
    with state.locked(), pytest.raises(AlreadyRunning):
        notifier.once()


def test_the_user_unit_runs_the_notifier_command() -> None:
    """systemd/gpuallocd-notify.service starts `gpuallocctl notify-agent`, a command that
    exists, as a user unit (no User=, wanted by the user's default target)."""
    from gpuallocd.cli import cli
    from gpuallocd.cli.lazy import all_commands

    unit = Path(__file__).resolve().parent.parent / "systemd" / "gpuallocd-notify.service"
    text = unit.read_text()
    (exec_start,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    assert exec_start.split()[-1] == "notify-agent" and "notify-agent" in all_commands(cli)
    assert "User=" not in text and "WantedBy=default.target" in text


def test_a_refused_mail_is_reported_without_its_address(tmp_path: Path) -> None:
    """An MTA that names the address it refused: the error the daemon is told (and the
    dashboard shows) says `[address]` instead."""
    from gpuallocd.notify.http_send import DeliveryError
    from gpuallocd.notify.mail import send_mail

    mta = tmp_path / "sendmail"
    said = "echo 'alice@lab.example: unknown user' >&2"
    mta.write_text(f"#!/bin/sh\ncat >/dev/null\n{said}\nexit 67\n")
    mta.chmod(0o755)
    with pytest.raises(DeliveryError) as refused:
        send_mail("alice@lab.example", {"title": "t", "body": "b"}, sendmail=str(mta))
    assert str(refused.value) == "sendmail exited with 67: [address]: unknown user"


def test_the_sites_webhook_is_signed_with_the_secret_of_a_root_only_file(
    start_daemon: Callable[..., ThreadDaemon],
    webhook_sink: WebhookSink,  # noqa: F811
    tmp_path: Path,
) -> None:
    """With `notify_site_secret_file`, a site webhook carries the HMAC of its body keyed by
    that file's secret, as a user's webhook does; it is checked by the receiver."""
    secret = new_secret()
    secret_file = tmp_path / "site.secret"
    secret_file.write_text(secret + "\n")
    secret_file.chmod(0o600)
    webhook_sink.secret = secret
    daemon = start_daemon(
        default_policy="simple",
        notify_site_channels=(f"webhook {webhook_sink.url}",),
        notify_site_events=("revoked",),
        notify_site_secret_file=str(secret_file),
    )
    with daemon.client() as client:
        client.revoke(client.allocate(1).id, reason="maintenance")
    wait_for(lambda: webhook_sink.deliveries, 20, what="the site's delivery")
    (delivery,) = webhook_sink.deliveries
    assert delivery.signed is True and delivery.json["kind"] == "revoked"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_site_secret_file_open_to_others_is_refused(tmp_path: Path, mode: int) -> None:
    """A secret others may read (or a link, or one too short) stops the start with a config
    error that says what to do; nothing is sent unsigned in its place."""
    from gpuallocd.daemon.site_notices import site_secret
    from gpuallocd.errors import ConfigError

    secret_file = tmp_path / "site.secret"
    secret_file.write_text(new_secret())
    secret_file.chmod(mode)
    with pytest.raises(ConfigError, match="open to others"):
        site_secret(str(secret_file))
    secret_file.chmod(0o600)
    link = tmp_path / "link.secret"
    link.symlink_to(secret_file)
    with pytest.raises(ConfigError, match="symbolic link"):
        site_secret(str(link))
    (tmp_path / "short.secret").write_text("abc")
    (tmp_path / "short.secret").chmod(0o400)
    with pytest.raises(ConfigError, match="shorter than 16"):
        site_secret(str(tmp_path / "short.secret"))
    assert site_secret(str(secret_file)) == secret_file.read_text()
