"""A notice as each channel carries it: a webhook's JSON, the one-line title and the plain
text of mail and ntfy. Text the daemon wrote is escaped already (model/notice.py); here it is
held to a length each medium takes."""

from __future__ import annotations

import json
import time
from typing import Any

__all__ = ["MAX_BODY", "MAX_TITLE", "one_line", "text_of", "title_of", "webhook_body"]

MAX_TITLE = 150
MAX_BODY = 2000
PAYLOAD_VERSION = 1


def one_line(text: str, limit: int) -> str:
    """`text` with every control character (a line end too) turned into a space, cut to
    `limit` characters."""
    flat = "".join(c if c.isprintable() else " " for c in text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def title_of(notice: dict[str, Any]) -> str:
    return one_line(str(notice.get("title", "")), MAX_TITLE)


def text_of(notice: dict[str, Any]) -> str:
    """The body, with when it happened and which lease, for mail and ntfy."""
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(float(notice.get("at", 0))))
    body = one_line(str(notice.get("body", "")), MAX_BODY)
    lease = notice.get("lease_id")
    tail = f"\n\nlease {lease}, {when}" if lease else f"\n\n{when}"
    return body + tail


def webhook_body(notice: dict[str, Any], host: str) -> bytes:
    """The JSON a webhook receives (docs/notifications.md shows one)."""
    payload = {
        "version": PAYLOAD_VERSION,
        "host": host,
        "id": notice.get("seq"),
        "key": notice.get("key"),
        "kind": notice.get("kind"),
        "user": notice.get("user"),
        "at": notice.get("at"),
        "lease_id": notice.get("lease_id"),
        "title": title_of(notice),
        "body": one_line(str(notice.get("body", "")), MAX_BODY),
        "data": notice.get("data") or {},
    }
    return json.dumps(payload, sort_keys=True).encode()
