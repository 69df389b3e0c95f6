"""Connection limits: no local user can take the daemon's file descriptors from the others.

Each connection is counted against the uid the kernel names for it (SO_PEERCRED on the API
socket; on the TCP ports, metrics and dashboard, the owner of the other end where it is a
socket of this host, `tcp_peers.py`, else its address). A user or a peer may hold
`per_user` connections at once; all of them together `total - root_reserve`, so the last
`root_reserve` slots are root's alone (root can always look and revoke). The API socket and
the TCP ports have budgets of their own (`connection_limiters`): nothing done on a port
takes a slot of the socket. The budgets together are kept below the process's open-file
limit, so accepting never fails for want of a descriptor. A connection over its limit is
closed at once, before any HTTP is read. Refusals and accept errors are logged at most once
per `LOG_INTERVAL_SECONDS`, with a count.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ConnectionLimiter",
    "Peer",
    "RateLimitedLog",
    "connection_limiters",
    "fit_to_open_files",
    "quiet_accept_errors",
]

log = logging.getLogger("gpuallocd.api")

LOG_INTERVAL_SECONDS = 60.0
FILES_KEPT_FOR_THE_DAEMON = 64  # the ledger, the lock, pidfds, NVML, logging
PORT_CONNECTIONS = 256  # the metrics and dashboard ports together, apart from the socket's


@dataclass
class RateLimitedLog:
    """A warning logged at most once per interval; what was held back is counted."""

    interval: float = LOG_INTERVAL_SECONDS
    _last: float = field(default=-float("inf"))
    _held: int = 0

    def warning(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            self._held += 1
            return
        held, self._held, self._last = self._held, 0, now
        suffix = f" ({held} more like it since the last report)" if held else ""
        log.warning(message + suffix, *args)


def fit_to_open_files(wanted: int) -> int:
    """Raise the soft open-file limit to the hard one; the connections that then fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return max(1, min(wanted, soft - FILES_KEPT_FOR_THE_DAEMON))


Peer = int | str  # a uid (-1 when unknown), or a TCP peer the kernel names no owner of


def connection_limiters(
    *, per_user: int, total: int, root_reserve: int, ports: bool
) -> tuple[ConnectionLimiter, ConnectionLimiter]:
    """The API socket's limiter and the TCP ports' (`ports`: whether any is served), each of
    its own budget; both fit the open-file limit, the socket's keeping the larger share."""
    wanted = PORT_CONNECTIONS if ports else 0
    budget = fit_to_open_files(total + wanted)
    on_ports = max(1, min(wanted, budget // 4))
    api = ConnectionLimiter(
        per_user=per_user, total=max(1, budget - on_ports), root_reserve=root_reserve
    )
    port = ConnectionLimiter(
        per_user=per_user, total=on_ports, root_reserve=min(root_reserve, on_ports // 4)
    )
    return api, port


class ConnectionLimiter:
    """Counts open connections per uid and admits a new one only within the limits."""

    def __init__(self, *, per_user: int, total: int, root_reserve: int) -> None:
        self.per_user = per_user
        self.total = total
        self.root_reserve = min(root_reserve, total - 1)
        self._open: Counter[Peer] = Counter()
        self._refusals = RateLimitedLog()

    def admit(self, uid: Peer) -> bool:
        """Count a new connection of `uid`, or refuse it (and say so in the log, sometimes)."""
        in_use = sum(self._open.values())
        if uid == 0:
            allowed = in_use < self.total
        else:
            allowed = self._open[uid] < self.per_user and in_use < self.total - self.root_reserve
        if allowed:
            self._open[uid] += 1
            return True
        self._refusals.warning(
            "refused a connection of %s: it holds %d of %d, %d open in all (limit %d)",
            uid if isinstance(uid, str) else f"uid {uid}",
            self._open[uid],
            self.per_user,
            in_use,
            self.total,
        )
        return False

    def release(self, uid: Peer) -> None:
        self._open[uid] -= 1
        if self._open[uid] <= 0:
            del self._open[uid]


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Log the event loop's accept failures (EMFILE...) once per interval, without traceback."""
    accept_errors = RateLimitedLog()
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if message.startswith("socket.accept()"):
            accept_errors.warning("accepting connections failed: %s", context.get("exception"))
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
