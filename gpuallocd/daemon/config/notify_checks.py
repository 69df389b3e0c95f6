"""Checks of the notification settings that their types cannot say: each site channel reads
as one (`webhook URL`, `ntfy URL/TOPIC`), each site event is a kind of notice, the retention
is positive."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Protocol

from gpuallocd.errors import ConfigError
from gpuallocd.model.notice import NoticeKind
from gpuallocd.notify.channels import Channel, ChannelError, site_channel

__all__ = ["check_notify_settings", "site_channels"]


class _Notify(Protocol):
    @property
    def notify_retention_days(self) -> float: ...

    @property
    def notify_site_channels(self) -> tuple[str, ...]: ...

    @property
    def notify_site_events(self) -> tuple[str, ...]: ...


def site_channels(texts: Sequence[str], secret: str = "") -> list[Channel]:
    """The site's channels; its webhooks signed with `secret` (none: unsigned)."""
    try:
        channels = [site_channel(text) for text in texts]
    except ChannelError as exc:
        raise ConfigError(f"notify_site_channels: {exc}") from None
    return [dataclasses.replace(c, secret=secret) if c.kind == "webhook" else c for c in channels]


def check_notify_settings(config: _Notify) -> None:
    days = config.notify_retention_days
    if not (math.isfinite(days) and days > 0):
        raise ConfigError("notify_retention_days must be a positive number of days")
    site_channels(config.notify_site_channels)
    known = {kind.value for kind in NoticeKind}
    unknown = sorted(set(config.notify_site_events) - known)
    if unknown:
        raise ConfigError(
            f"notify_site_events: unknown {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
