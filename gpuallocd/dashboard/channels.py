"""Notification channels failing for the site: whose, which kind, how many deliveries in a
row failed, the last error, and since when (docs/notifications.md).

Only what the ledger keeps of a delivery is shown (`notify_reports`: the kind, the error's
first words, the counts): never a target or a secret, which the daemon never holds, nor the
channel's id, a short hash of its target that would let a viewer confirm a guessed address.
The error is written by the user's own notifier, so it is escaped like any user's text, and
words that look like a URL or a mail address are blanked out: the page is seen by whoever
reaches its port, a user's mail relay may name the address it refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from gpuallocd.dashboard.text import clock_time, duration, esc
from gpuallocd.model.notice import SITE_UID

__all__ = ["SHOWN_CHANNELS", "failing_channels_html", "without_addresses"]

SHOWN_CHANNELS = 20  # rows; the rest are counted under the table
_ADDRESS_LIKE = re.compile(r"[a-z][a-z0-9+.-]*://\S*|\S+@\S+", re.IGNORECASE)
HIDDEN = "[address]"


def without_addresses(error: str | None) -> str:
    """An error as the page shows it: URLs and mail addresses in it replaced."""
    return _ADDRESS_LIKE.sub(HIDDEN, error or "")


def _since(row: dict[str, Any], now: float) -> str:
    """Failing since after its last delivery; `never delivered` where none arrived."""
    last_ok = row["last_ok_at"]
    if last_ok is None:
        return "never delivered"
    return f"last delivered {clock_time(last_ok)} ({duration(now - last_ok)} ago)"


def _row(row: dict[str, Any], now: float, user_name: Callable[[int], str]) -> str:
    who = "site" if row["uid"] == SITE_UID else user_name(row["uid"])
    cells = (
        esc(who),
        esc(row["kind"]),
        esc(row["failures"]),
        esc(without_addresses(row["error"])),
        esc(clock_time(row["at"])),
        esc(_since(row, now)),
    )
    return '<tr class="channel">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def failing_channels_html(
    rows: Sequence[dict[str, Any]], now: float, user_name: Callable[[int], str]
) -> str:
    """One row a failing channel, the site's and users'; a plain line when none fails."""
    if not rows:
        return '<p class="empty">none failing</p>'
    head = ("user", "channel", "failed in a row", "last error", "last tried", "since")
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join(_row(dict(r), now, user_name) for r in rows[:SHOWN_CHANNELS])
    more = len(rows) - SHOWN_CHANNELS
    tail = f'<p class="more">and {more} more</p>' if more > 0 else ""
    return (
        f'<table class="channels alarm"><thead><tr>{th}</tr></thead>'
        f"<tbody>{body}</tbody></table>{tail}"
    )
