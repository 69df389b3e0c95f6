"""Delivering notices to people: a user's channels, and the daemon's site channels.

    channels.py     a channel (desktop, webhook, mail, ntfy): its target checked, its id
    user_config.py  the user's own channels file (`notify.toml`, mode 0600, theirs alone)
    state.py        the notifier's cursor and each channel's last delivery (durable)
    signing.py      a webhook's HMAC-SHA256 signature, with a timestamp against replays
    payload.py      a notice as a webhook's JSON and as the plain text of mail and ntfy
    http_send.py    webhook and ntfy POSTs: timeouts, retries with back-off, no redirects
    mail.py         mail through the local MTA (`sendmail -t`), headers that cannot be forged
    desktop.py      the user's desktop: org.freedesktop.Notifications on their session bus
    deliver.py      one notice to one channel, its result in words (no target, no secret)
    agent.py        `gpuallocctl notify-agent`: the feed, long-polled over the socket,
                    delivered to each channel, the cursor advanced after each delivery

A user's notifier runs as that user, with that user's rights alone: the daemon never holds a
user's channels or secrets, never connects to a user's bus, never posts to a URL a user
chose. Only the site's channels, set by root in the daemon's config, are delivered by the
daemon (daemon/site_notices.py), with the same senders.
"""

from __future__ import annotations
