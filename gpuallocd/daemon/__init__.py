"""The daemon: its command, lifecycle and housekeeping, in front of three rooms.

main.py             `gpuallocd`: options from the settings table, errors to exit codes
lifecycle.py        Daemon: start up, serve until signalled, shut down
housekeeping.py     background loops: expiry, live sampling, process polling
assembly.py         the composition root: every allocator part made and handed out
driver_guard.py     GPU driver calls off the loop, one at a time, with a deadline
diagnostics.py      what the running daemon tells `doctor`; config warnings
hints.py            what to do next, added to the first startup errors
socketwatch.py      noticing that the served socket was removed or replaced
sdnotify.py         READY/STOPPING/WATCHDOG for systemd's Type=notify and its watchdog
logformat.py        the log's formatter: what users control is escaped
eventloop.py        uvloop where installed, else asyncio's loop
site_notices.py     the site's channels: notices posted by the daemon, off its loop

config/         the settings: declared, read, checked, turned into domain values
startup/        what a start checks and takes before it serves
ledger_care/    the ledger opened whole, backed up, recovered when damaged
"""

from __future__ import annotations

from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.lifecycle import Daemon
from gpuallocd.daemon.main import main

__all__ = ["Daemon", "DaemonConfig", "main"]
