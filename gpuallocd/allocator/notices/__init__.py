"""Notices: what people are told of their leases, each once, from a per-user feed.

    desk.py          NoticeDesk: the façade's part: the feed and its long poll, thresholds,
                     delivery reports, the timer's tick, what a sample tells
    ahead.py         EndingAhead: a lease's coming end, warned at thresholds (one heap)
    endings.py       each reason's deadline: expiry, an advance reservation, idle reclaim
    budget_watch.py  when to read a user's use against their budgets again

Grants after a wait and ends are written by the ledger with the transition itself
(ledger/notice_records.py); the notices' wording is pure (model/notice.py). Delivery to
people (desktop, webhook, mail, ntfy) is not here: each user's notifier reads the feed over
the socket (gpuallocd/notify/), the site's channels are the daemon's (daemon/site_notices.py).
"""

from __future__ import annotations

from gpuallocd.allocator.notices.desk import NoticeDesk

__all__ = ["NoticeDesk"]
