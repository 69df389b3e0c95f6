"""The site's own channels (`notify_site_channels`, set by root in the daemon's config): the
notices of `notify_site_events` (an unhealthy GPU by default) posted to a lab's chat webhook
or an ntfy topic. Delivered by the daemon, off its event loop (each delivery on a thread of
its own, one at a time, with the senders' timeouts and retries), its place in the feed kept
in the ledger so a restart neither repeats nor skips one. Users' channels are never here:
each user's notifier delivers their own (gpuallocd/notify/). The site's webhooks are signed
with the secret of `notify_site_secret_file`, a file only root may read.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gpuallocd.allocator import AllocatorFacade
from gpuallocd.daemon.startup.integrity import read_private_file
from gpuallocd.errors import ConfigError, GpuallocError, StateUnusable
from gpuallocd.model.notice import SITE_UID
from gpuallocd.notify.channels import Channel
from gpuallocd.notify.deliver import DeliveryError, Senders, deliver

__all__ = ["MIN_SECRET_LENGTH", "SiteNotices", "site_secret"]

log = logging.getLogger(__name__)

POLL_SECONDS = 60.0
SITE_KINDS = "gpu-unhealthy"  # the site feed's own; the rest are read from every user's
MIN_SECRET_LENGTH = 16  # characters of the site's webhook secret


def site_secret(path: str | None) -> str:
    """The secret the site's webhooks are signed with, from a file only root reads."""
    if path is None:
        return ""
    try:
        secret = read_private_file(Path(path), "notify_site_secret_file")
    except StateUnusable as exc:
        raise ConfigError(exc.message) from None
    if len(secret) < MIN_SECRET_LENGTH:
        raise ConfigError(
            f"notify_site_secret_file {path}: the secret is shorter than {MIN_SECRET_LENGTH} "
            "characters (make one: openssl rand -hex 32)"
        )
    return secret


class SiteNotices:
    """Reads every feed (as root does) and posts what the site asked for to its channels."""

    def __init__(
        self, facade: AllocatorFacade, channels: Sequence[Channel], events: Sequence[str]
    ) -> None:
        self._facade = facade
        self._channels = tuple(channels)
        self._events = frozenset(events)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="site-notices")
        self._task: asyncio.Task[None] | None = None
        self._senders = Senders()

    async def start(self) -> None:
        if self._channels:
            self._task = asyncio.create_task(self._forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _wanted(self, notice: dict[str, Any]) -> bool:
        if notice["kind"] not in self._events:
            return False
        site = notice["uid"] == SITE_UID
        return site if notice["kind"] == SITE_KINDS else not site

    async def _forever(self) -> None:
        cursor = await self._facade.notices.site_cursor()
        while True:
            try:
                answer = await self._facade.notices.read(None, cursor, POLL_SECONDS)
            except GpuallocError as exc:
                log.error("reading notices for the site's channels failed: %s", exc.message)
                await asyncio.sleep(POLL_SECONDS)
                continue
            for notice in answer["notices"]:
                if self._wanted(notice):
                    await self._deliver(notice)
                cursor = int(notice["seq"])
            if answer["notices"]:
                await self._facade.notices.site_delivered(cursor)

    async def _deliver(self, notice: dict[str, Any]) -> None:
        loop = asyncio.get_running_loop()
        for channel in self._channels:
            error = None
            try:
                await loop.run_in_executor(self._pool, deliver, channel, notice, self._senders)
            except DeliveryError as exc:
                error = str(exc)
                log.warning(
                    "site channel %s: notice %s not delivered: %s", channel.id, notice["seq"], error
                )
            await self._facade.notices.site_report(channel.id, channel.kind, error is None, error)
