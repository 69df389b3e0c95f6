"""`gpuallocctl notify-agent`: the user's notifier. It long-polls the user's feed over the
daemon's socket (the daemon answers each user with their own notices: SO_PEERCRED), delivers
each notice to every channel of the user's file that wants it, reports each delivery's result
(the channel's kind and id, ok or the error's first words) to the daemon, and advances its
cursor, durably, after each notice.

A notifier that was away (logged out, stopped) finds the notices it missed when it returns:
those younger than `stale_after_seconds` are delivered as they are; older ones are summed up
in one notice per channel ("7 notices while you were away"), so a night away does not become
a burst of stale pop-ups. Notices the daemon purged meanwhile (`notify_retention_days`) are
said to be missing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpulease import Client, DaemonUnavailable, GpuallocError

from gpuallocd.notify.channels import Channel
from gpuallocd.notify.deliver import DeliveryError, Senders, deliver
from gpuallocd.notify.http_send import forbidden_by
from gpuallocd.notify.state import NotifyState
from gpuallocd.notify.user_config import NotifyConfig

__all__ = ["Agent", "stale_summary"]

log = logging.getLogger("gpuallocd.notify")

POLL_SECONDS = 60.0
RECONNECT_SECONDS = 5.0
BATCH = 100
SHOWN_IN_SUMMARY = 5


def stale_summary(notices: Sequence[dict[str, Any]], now: float, purged: bool) -> dict[str, Any]:
    """One notice that sums up `notices` (and says if older ones were purged)."""
    titles = [str(n.get("title", "")) for n in notices[:SHOWN_IN_SUMMARY]]
    more = len(notices) - len(titles)
    body = "; ".join(titles) + (f"; and {more} more" if more > 0 else "")
    if purged:
        body += ("; " if body else "") + "older notices were purged by the daemon"
    first = notices[0]["seq"] if notices else 0
    last = notices[-1]["seq"] if notices else 0
    return {
        "seq": last,
        "kind": "stale",
        "key": f"stale:{first}-{last}",
        "user": notices[0].get("user") if notices else None,
        "at": now,
        "lease_id": None,
        "title": f"{len(notices)} gpuallocd notice(s) from while your notifier was away",
        "body": body or "notices were missed",
        "data": {"count": len(notices), "first_seq": first, "last_seq": last, "purged": purged},
    }


class Agent:
    """One user's notifier for one daemon (its socket names the cursor)."""

    def __init__(
        self,
        connect: Callable[[], Client],
        socket_key: str,
        *,
        config_path: Path | None = None,
        state: NotifyState | None = None,
        senders: Senders | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._connect = connect
        self._socket = socket_key
        self._config_path = config_path
        self._state = state or NotifyState.load()
        self._senders = senders or Senders()
        self._clock = clock
        self._sleep = sleep
        self.delivered = 0

    def run(self, *, once: bool = False, poll_seconds: float = POLL_SECONDS) -> int:
        """Deliver until stopped (`once`: what is there now, then return); how many notices
        were delivered. DaemonUnavailable only with `once`: otherwise it waits and retries."""
        with self._state.locked():
            while True:
                try:
                    with self._connect() as client:
                        self._serve(client, once, poll_seconds)
                    return self.delivered
                except DaemonUnavailable:
                    if once:
                        raise
                    log.warning("the daemon is not answering; trying again")
                    self._sleep(RECONNECT_SECONDS)

    def _serve(self, client: Client, once: bool, poll_seconds: float) -> None:
        ports = [p.get("listen") for p in client.health().get("ports", [])]
        senders = Senders(
            host=self._senders.host,
            forbidden=forbidden_by(str(p) for p in ports if p),
            sendmail=self._senders.sendmail,
            retry=self._senders.retry,
            sleep=self._senders.sleep,
            clock=self._senders.clock,
        )
        while True:
            after = self._state.cursors.get(self._socket, 0)
            answer = client.notifications(
                after=after, wait=0 if once else poll_seconds, limit=BATCH
            )
            if after > int(answer.get("last", after)):
                log.warning("the daemon's feed is new (its ledger was replaced): from its start")
                self._state.cursors[self._socket] = 0
                continue
            self._batch(client, answer, senders)
            if once and not answer.get("more"):
                return

    def _batch(self, client: Client, answer: dict[str, Any], senders: Senders) -> None:
        config = NotifyConfig.load(self._config_path)  # channels added since are used at once
        if config.sendmail:
            senders = Senders(
                senders.host,
                senders.forbidden,
                config.sendmail,
                senders.retry,
                senders.sleep,
                senders.clock,
            )
        now = self._clock()
        stale: list[dict[str, Any]] = []
        kept_since = answer.get("kept_since")
        last_at = self._state.delivered_at.get(self._socket)
        purged = bool(kept_since and last_at is not None and last_at < float(kept_since))
        for notice in answer.get("notices", []):
            if now - float(notice["at"]) > config.stale_after_seconds:
                stale.append(notice)
                continue
            if stale or purged:
                self._deliver(client, config.channels, stale_summary(stale, now, purged), senders)
                stale, purged = [], False
            self._deliver(client, config.channels, notice, senders)
        if stale or purged:
            self._deliver(client, config.channels, stale_summary(stale, now, purged), senders)

    def _deliver(
        self,
        client: Client,
        channels: Sequence[Channel],
        notice: dict[str, Any],
        senders: Senders,
    ) -> None:
        """To every channel that wants it, each result reported; then the cursor, synced."""
        for channel in channels:
            if notice["kind"] != "stale" and not channel.wants(str(notice["kind"])):
                continue
            error = None
            try:
                deliver(channel, notice, senders)
                log.info(
                    "notice %s (%s) delivered to %s", notice["seq"], notice["kind"], channel.id
                )
            except DeliveryError as exc:
                error = str(exc)
                log.warning("notice %s not delivered to %s: %s", notice["seq"], channel.id, error)
            self._state.note(channel.id, self._clock(), error)
            self._report(client, channel, error)
        self._state.cursors[self._socket] = max(
            int(notice["seq"] or 0), self._state.cursors.get(self._socket, 0)
        )
        self._state.delivered_at[self._socket] = float(notice["at"])
        self._state.save()
        self.delivered += 1

    @staticmethod
    def _report(client: Client, channel: Channel, error: str | None) -> None:
        """The daemon learns the kind, the id and the error's first words; never the target."""
        summary = None if error is None else error.split(":")[0][:120]
        try:
            client.report_delivery(channel.id, channel.kind, error is None, summary)
        except GpuallocError as exc:
            log.warning("could not report the delivery to the daemon: %s", exc)
