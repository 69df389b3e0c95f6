"""One notice to one channel, by its kind; DeliveryError says why it did not arrive.

`Senders` carries what a delivery needs besides the channel: the host's name for the
payload, the daemon's own ports (refused as webhook targets), the MTA, the retry policy and
the sleep between retries (a test's clock)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuallocd import __version__
from gpuallocd.notify.channels import DEFAULT_NTFY_SERVER, Channel
from gpuallocd.notify.desktop import URGENT_KINDS, send_desktop
from gpuallocd.notify.http_send import DeliveryError, Forbidden, Retry, post
from gpuallocd.notify.mail import send_mail
from gpuallocd.notify.payload import MAX_BODY, one_line, title_of, webhook_body
from gpuallocd.notify.signing import SIGNATURE_HEADER, sign

__all__ = ["DeliveryError", "Senders", "deliver"]


@dataclass(frozen=True)
class Senders:
    host: str = field(default_factory=socket.gethostname)
    forbidden: Forbidden = field(default_factory=Forbidden)
    sendmail: str = ""
    retry: Retry = field(default_factory=Retry)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.time


def deliver(channel: Channel, notice: dict[str, Any], senders: Senders) -> None:
    if channel.kind == "desktop":
        send_desktop(notice)
    elif channel.kind == "mail":
        send_mail(channel.target, notice, sendmail=senders.sendmail or None)
    elif channel.kind == "webhook":
        _webhook(channel, notice, senders)
    elif channel.kind == "ntfy":
        _ntfy(channel, notice, senders)
    else:
        raise DeliveryError(f"unknown channel kind {channel.kind!r}")


def _webhook(channel: Channel, notice: dict[str, Any], senders: Senders) -> None:
    body = webhook_body(notice, senders.host)

    def headers() -> dict[str, str]:
        found = {
            "Content-Type": "application/json",
            "User-Agent": f"gpuallocd/{__version__}",
            "X-Gpuallocd-Delivery": one_line(str(notice.get("key", "")), 200),
        }
        if channel.secret:
            found[SIGNATURE_HEADER] = sign(channel.secret, int(senders.clock()), body)
        return found

    post(
        channel.target,
        body,
        headers,
        retry=senders.retry,
        forbidden=senders.forbidden,
        sleep=senders.sleep,
    )


def _ntfy(channel: Channel, notice: dict[str, Any], senders: Senders) -> None:
    """ntfy's JSON publishing (the topic in the body: no header carries a user's text)."""
    server = (channel.server or DEFAULT_NTFY_SERVER).rstrip("/")
    body = json.dumps(
        {
            "topic": channel.target,
            "title": title_of(notice),
            "message": one_line(str(notice.get("body", "")), MAX_BODY),
            "priority": 4 if notice.get("kind") in URGENT_KINDS else 3,
            "tags": ["gpuallocd", str(notice.get("kind", ""))],
        }
    ).encode()

    def headers() -> dict[str, str]:
        return {"Content-Type": "application/json", "User-Agent": f"gpuallocd/{__version__}"}

    post(
        server + "/",
        body,
        headers,
        retry=senders.retry,
        forbidden=senders.forbidden,
        sleep=senders.sleep,
    )
