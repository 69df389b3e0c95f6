"""A channel: where notices go (a desktop, a webhook URL, a mail address, an ntfy topic), its
target checked once, when it is added, so nothing odd ever reaches a header or a command line.

A channel's `id` is its kind and a short hash of its target: reports to the daemon (`doctor`,
the dashboard) name it by that, never by the target or the secret.
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuallocd.model.notice import NoticeKind

__all__ = [
    "DEFAULT_NTFY_SERVER",
    "KINDS",
    "Channel",
    "ChannelError",
    "channel_id",
    "checked_address",
    "checked_events",
    "checked_topic",
    "checked_url",
    "site_channel",
]

KINDS = ("desktop", "webhook", "mail", "ntfy")
DEFAULT_NTFY_SERVER = "https://ntfy.sh"
MAX_TARGET_LENGTH = 2000
# An address as people write one, and nothing a header could be forged with: no spaces,
# commas, angle brackets, quotes or line ends (RFC 5322's dot-atom, which covers real use).
_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})")
_TOPIC = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ChannelError(ValueError):
    """A channel that cannot be: what is wrong, in words."""


@dataclass(frozen=True, slots=True)
class Channel:
    """One place to deliver to. `secret` signs a webhook's payload; `events` are the kinds of
    notice it gets (all when empty); `server` is an ntfy server's URL."""

    kind: str
    target: str = ""
    secret: str = ""
    events: tuple[str, ...] = ()
    server: str = ""
    id: str = field(default="")

    def __post_init__(self) -> None:
        if not self.id:
            object.__setattr__(self, "id", channel_id(self.kind, self.server + self.target))

    def wants(self, kind: str) -> bool:
        return not self.events or kind in self.events

    @property
    def shown(self) -> str:
        """The target as `notify list` shows it to its owner (never the secret)."""
        if self.kind == "ntfy":
            return f"{self.server}/{self.target}"
        return self.target or "(your session's desktop)"


def channel_id(kind: str, target: str) -> str:
    digest = hashlib.sha256(target.encode()).hexdigest()[:8]
    return f"{kind}-{digest}"


def checked_url(url: str, *, what: str = "webhook") -> str:
    """An http(s) URL with a host, on one line, without spaces; anything else is refused."""
    if len(url) > MAX_TARGET_LENGTH or not url.isprintable() or any(c.isspace() for c in url):
        raise ChannelError(f"the {what} URL must be one line without spaces")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ChannelError(f"the {what} URL must be http:// or https:// with a host")
    try:
        parts.port  # noqa: B018 - a port that is not a number raises
    except ValueError as exc:
        raise ChannelError(f"the {what} URL's port is not a port: {exc}") from None
    return url


def checked_address(address: str) -> str:
    if not _ADDRESS.fullmatch(address):
        raise ChannelError(
            "a mail address is one plain addr@host (no name, spaces, commas or brackets)"
        )
    return address


def checked_topic(topic: str) -> str:
    if not _TOPIC.fullmatch(topic):
        raise ChannelError("an ntfy topic is 1 to 64 of A-Z, a-z, 0-9, _ and -")
    return topic


def checked_events(events: Sequence[str]) -> tuple[str, ...]:
    known = {kind.value for kind in NoticeKind}
    unknown = sorted(set(events) - known)
    if unknown:
        raise ChannelError(
            f"unknown event(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return tuple(dict.fromkeys(events))


def site_channel(text: str) -> Channel:
    """A site channel as the daemon's config writes one: `webhook URL` or `ntfy URL/TOPIC`."""
    kind, _, target = text.strip().partition(" ")
    target = target.strip()
    if kind == "webhook":
        return Channel("webhook", checked_url(target))
    if kind == "ntfy":
        server, _, topic = checked_url(target, what="ntfy").rstrip("/").rpartition("/")
        if not server.partition("://")[2]:
            raise ChannelError("an ntfy site channel is `ntfy https://SERVER/TOPIC`")
        return Channel("ntfy", checked_topic(topic), server=server)
    raise ChannelError(f"a site channel is `webhook URL` or `ntfy URL/TOPIC`, not {text!r}")
