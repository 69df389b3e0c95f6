"""The daemon: its command and options, settings, lifecycle, lock, sd_notify, housekeeping.

main.py          `gpuallocd`: options from the settings table, errors to exit codes
settings.py      every setting declared once (name, type, default, meaning)
config.py        defaults < config file < environment < options
lifecycle.py     Daemon: start up, serve until signalled, shut down
housekeeping.py  background loops: expiry, live sampling, process polling
statelock.py     one daemon per state directory
sdnotify.py      READY/STOPPING/WATCHDOG for systemd's Type=notify and its watchdog
activation.py    the listening socket systemd passes (socket activation, LISTEN_FDS)
"""

from __future__ import annotations

from gpuallocd.daemon.lifecycle import Daemon
from gpuallocd.daemon.main import main
from gpuallocd.daemon.settings import DaemonConfig

__all__ = ["Daemon", "DaemonConfig", "main"]
