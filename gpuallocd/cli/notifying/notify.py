"""`notify`: your own channels (desktop, webhook, mail, ntfy), kept in your own file; your
warning thresholds, kept by the daemon; your feed. `notify-agent`: the notifier that delivers
your feed to your channels (a systemd user unit, docs/notifications.md)."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from gpuallocd.cli.common import daemon_client
from gpuallocd.cli.errors import EXIT_ERROR, EXIT_USAGE, CliError
from gpuallocd.cli.output import echo_json, escape_unprintable, table
from gpuallocd.cli.quantities import Duration, typed_duration
from gpuallocd.notify.channels import (
    DEFAULT_NTFY_SERVER,
    KINDS,
    Channel,
    ChannelError,
    checked_address,
    checked_events,
    checked_topic,
    checked_url,
)
from gpuallocd.notify.deliver import DeliveryError, Senders, deliver
from gpuallocd.notify.signing import new_secret
from gpuallocd.notify.state import AlreadyRunning, NotifyState
from gpuallocd.notify.user_config import ConfigFileError, NotifyConfig

__all__ = ["COMMANDS"]


def _config() -> NotifyConfig:
    try:
        return NotifyConfig.load()
    except ConfigFileError as exc:
        raise CliError(str(exc), EXIT_ERROR) from None


def _save(config: NotifyConfig) -> None:
    try:
        config.save()
    except OSError as exc:
        raise CliError(f"cannot write {config.path}: {exc.strerror or exc}", EXIT_ERROR) from None


def _channel(kind: str, target: str | None, events: tuple[str, ...], server: str) -> Channel:
    try:
        chosen = checked_events(events)
        if kind == "desktop":
            if target:
                raise ChannelError("desktop takes no target: your session's bus is used")
            return Channel("desktop", events=chosen)
        if not target:
            raise ChannelError(f"{kind} needs a target: notify add {kind} TARGET")
        if kind == "webhook":
            return Channel("webhook", checked_url(target), new_secret(), chosen)
        if kind == "mail":
            return Channel("mail", checked_address(target), events=chosen)
        server = checked_url(server, what="ntfy server").rstrip("/")
        return Channel("ntfy", checked_topic(target), events=chosen, server=server)
    except ChannelError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


@click.group(short_help="Your notification channels, thresholds and feed")
def notify() -> None:
    """Your notifications: channels, thresholds, the feed (docs/notifications.md)."""


@notify.command("add")
@click.argument("kind", type=click.Choice(KINDS))
@click.argument("target", required=False)
@click.option(
    "--events",
    default="",
    metavar="KIND,...",
    help="Only these notices (granted, ending, revoked, ended, budget, gpu-unhealthy, "
    "unleased-use); all by default.",
)
@click.option(
    "--server", default=DEFAULT_NTFY_SERVER, show_default=True, help="ntfy: the server's URL."
)
@click.pass_context
def add(ctx: click.Context, kind: str, target: str | None, events: str, server: str) -> None:
    """Add a channel: `desktop`, `webhook URL`, `mail ADDRESS` or `ntfy TOPIC`.

    Kept in your own file (0600); a webhook's signing secret is made here and shown once."""
    wanted = tuple(e.strip() for e in events.split(",") if e.strip())
    channel = _channel(kind, target, wanted, server)
    config = _config()
    try:
        config = config.with_channel(channel)
    except ConfigFileError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    _save(config)
    if ctx.obj.json:
        echo_json({"id": channel.id, "kind": kind, "secret": channel.secret or None})
        return
    click.echo(f"added {channel.id}: {kind} {escape_unprintable(channel.shown)}")
    if channel.secret:
        click.echo(f"signing secret (shown once; kept in {config.path}): {channel.secret}")


@notify.command("list")
@click.pass_context
def list_(ctx: click.Context) -> None:
    """Your channels, each with its last delivery and its error; your thresholds."""
    config = _config()
    state = NotifyState.load()
    rows: list[dict[str, Any]] = []
    for channel in config.channels:
        last = state.channels.get(channel.id, {})
        when = last.get("at")
        rows.append(
            {
                "id": channel.id,
                "kind": channel.kind,
                "target": channel.shown,
                "events": list(channel.events) or ["all"],
                "last_delivery": when,
                "ok": last.get("ok"),
                "error": last.get("error"),
            }
        )
    thresholds = _thresholds_or_none(ctx)
    if ctx.obj.json:
        echo_json({"channels": rows, "thresholds_seconds": thresholds, "file": str(config.path)})
        return
    shown = [
        (
            r["id"],
            r["kind"],
            escape_unprintable(r["target"]),
            ",".join(r["events"]),
            _when(r["last_delivery"]),
            "-" if r["ok"] is None else ("ok" if r["ok"] else escape_unprintable(r["error"] or "")),
        )
        for r in rows
    ]
    if shown:
        headers = ("ID", "KIND", "TARGET", "EVENTS", "LAST DELIVERY", "RESULT")
        click.echo(table(headers, shown))
    else:
        click.echo("no channels yet: gpuallocctl notify add desktop")
    if thresholds is not None:
        click.echo(
            "warned before a lease ends: " + ", ".join(typed_duration(t) for t in thresholds)
        )


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _thresholds_or_none(ctx: click.Context) -> list[float] | None:
    from gpulease import GpuallocError

    try:
        with daemon_client(ctx) as client:
            return list(client.notify_settings()["thresholds_seconds"])
    except GpuallocError:
        return None


@notify.command("remove")
@click.argument("channel_id")
@click.pass_context
def remove(ctx: click.Context, channel_id: str) -> None:
    """Remove one of your channels (by its id, `notify list`)."""
    from gpulease import GpuallocError

    config = _config()
    try:
        config = config.without(channel_id)
    except ConfigFileError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    _save(config)
    try:
        with daemon_client(ctx) as client:
            client.forget_channel(channel_id)
    except GpuallocError:
        pass  # the daemon's report of it goes at its next start of reports, or never matters
    click.echo(f"removed {channel_id}")


@notify.command("test")
@click.argument("channel_id", required=False)
@click.pass_context
def test(ctx: click.Context, channel_id: str | None) -> None:
    """Send a test notice to each of your channels (or one) now, from here."""
    config = _config()
    channels = [config.channel(channel_id)] if channel_id else list(config.channels)
    if not channels:
        raise CliError("no channels yet: gpuallocctl notify add desktop", EXIT_USAGE)
    notice = _test_notice()
    failed = 0
    results = []
    for channel in channels:
        try:
            deliver(channel, notice, Senders(sendmail=config.sendmail))
            results.append({"id": channel.id, "ok": True, "error": None})
        except DeliveryError as exc:
            failed += 1
            results.append({"id": channel.id, "ok": False, "error": str(exc)})
    if ctx.obj.json:
        echo_json({"results": results})
    else:
        for r in results:
            click.echo(f"{r['id']}: " + ("delivered" if r["ok"] else f"failed: {r['error']}"))
    if failed:
        raise CliError(f"{failed} channel(s) failed", EXIT_ERROR)


def _test_notice() -> dict[str, Any]:
    now = time.time()
    return {
        "seq": 0,
        "kind": "test",
        "key": f"test:{int(now)}",
        "user": os.environ.get("USER", ""),
        "at": now,
        "lease_id": None,
        "title": "gpuallocd test notice",
        "body": "this channel works: lease notices will arrive here",
        "data": {},
    }


@notify.command("thresholds")
@click.argument("durations", nargs=-1, type=Duration(minimum=10))
@click.option("--reset", is_flag=True, help="Back to the defaults (15m and 1m).")
@click.pass_context
def thresholds(ctx: click.Context, durations: tuple[float, ...], reset: bool) -> None:
    """Show or set how long before a lease ends you are warned (e.g. `15m 1m`)."""
    with daemon_client(ctx) as client:
        if reset:
            settings = client.set_notify_thresholds(None)
        elif durations:
            settings = client.set_notify_thresholds(list(durations))
        else:
            settings = client.notify_settings()
    if ctx.obj.json:
        echo_json(settings)
        return
    shown = ", ".join(typed_duration(t) for t in settings["thresholds_seconds"])
    click.echo(
        f"warned {shown} before a lease ends" + (" (defaults)" if settings["default"] else "")
    )


@notify.command("feed")
@click.option("--after", type=click.IntRange(0), default=0, help="Notices numbered above this.")
@click.option("--all", "everyone", is_flag=True, help="Every user's notices (root).")
@click.option("--limit", type=click.IntRange(1, 500), default=100, show_default=True)
@click.pass_context
def feed(ctx: click.Context, after: int, everyone: bool, limit: int) -> None:
    """Your notices as the daemon keeps them (root: `--all` for everyone's)."""
    with daemon_client(ctx) as client:
        answer = client.notifications(after=after, limit=limit, everyone=everyone)
    if ctx.obj.json:
        echo_json(answer)
        return
    rows = [
        (
            n["seq"],
            _when(n["at"]),
            n["user"],
            n["kind"],
            escape_unprintable(f"{n['title']}: {n['body']}"),
        )
        for n in answer["notices"]
    ]
    click.echo(table(("SEQ", "AT", "USER", "KIND", "NOTICE"), rows) if rows else "no notices")


@click.command("notify-agent", short_help="Deliver your notices to your channels")
@click.option("--once", is_flag=True, help="Deliver what is there now, then exit.")
@click.option(
    "--poll", type=Duration(minimum=1), default=60.0, show_default=True, help="The long poll."
)
@click.pass_context
def notify_agent(ctx: click.Context, once: bool, poll: float) -> None:
    """Deliver your notices to your channels, as you (run by `systemctl --user`)."""
    from gpulease import Client

    from gpuallocd.notify.agent import Agent

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    socket = ctx.obj.socket or os.environ.get("GPUALLOCD_SOCKET")
    key = str(Path(socket).resolve()) if socket else "default"
    agent = Agent(lambda: Client(socket), key)
    try:
        delivered = agent.run(once=once, poll_seconds=poll)
    except AlreadyRunning as exc:
        raise CliError(str(exc), EXIT_ERROR) from None
    except KeyboardInterrupt:
        return
    if once:
        click.echo(f"delivered {delivered} notice(s)")


COMMANDS = (notify, notify_agent)
