"""systemd's notification protocol (sd_notify), for `Type=notify` services with a watchdog.

READY=1 once the socket serves, STOPPING=1 when a stop begins, and WATCHDOG=1 pings while
the event loop runs: systemd sets `WATCHDOG_USEC` (from `WatchdogSec=`) and, when a ping is
missing for that long, kills and restarts the service. The pings come from a task on the
event loop every half of that time, so a loop that is stuck (a blocking call, a busy loop)
stops pinging and systemd notices. Without `NOTIFY_SOCKET` nothing is sent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Mapping

__all__ = [
    "notify_ready",
    "notify_stopping",
    "notify_watchdog",
    "start_watchdog",
    "watchdog_interval",
]

log = logging.getLogger(__name__)


def _notify(message: str) -> None:
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError as exc:  # systemd went away or the socket is wrong: keep serving
        log.warning("cannot notify systemd (%s): %s", message, exc)


def notify_ready() -> None:
    _notify("READY=1")


def notify_stopping() -> None:
    _notify("STOPPING=1")


def notify_watchdog() -> None:
    _notify("WATCHDOG=1")


def watchdog_interval(environ: Mapping[str, str], pid: int) -> float | None:
    """Seconds between pings (half of `WATCHDOG_USEC`), or None when no watchdog is asked
    of this process (`WATCHDOG_PID`, when set, names another one)."""
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    watchdog_pid = environ.get("WATCHDOG_PID")
    if usec <= 0 or (watchdog_pid and watchdog_pid != str(pid)):
        return None
    return usec / 2 / 1_000_000


async def _ping_forever(interval: float) -> None:
    while True:
        notify_watchdog()
        await asyncio.sleep(interval)


def start_watchdog() -> asyncio.Task[None] | None:
    """Start pinging from the running event loop when systemd asked for it; cancel to stop."""
    interval = watchdog_interval(os.environ, os.getpid())
    if interval is None:
        return None
    log.debug("watchdog: pinging systemd every %.3g s", interval)
    return asyncio.get_running_loop().create_task(_ping_forever(interval))
