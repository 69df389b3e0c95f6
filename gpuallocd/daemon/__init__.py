"""The daemon: its command and options, settings, lifecycle, lock, sd_notify, housekeeping.

main.py               `gpuallocd`: options from the settings table, errors to exit codes
settings.py           every setting declared once (name, type, default, meaning)
config.py             defaults < config file < environment < options
limits_config.py      the `[limits]` table read strictly into a LimitsTable
scheduling_config.py  checks of the scheduling settings their types cannot say
wiring.py             the config turned into every domain value (at start and on reload)
lifecycle.py          Daemon: start up, serve until signalled, shut down
ledger_setup.py       the ledger opened at start: its files and its integrity checked
ledger_health.py      the ledger's integrity and backups, as doctor shows them
ledger_backups.py     backups on a timer, at a clean stop, and on an admin's request
backup_config.py      checks of the backup settings their types cannot say
recovery.py           `gpuallocd --recover`: rebuild a damaged ledger, never double-book
recovery_rebuild.py   the recovered ledger: salvaged rows, a backup, what the machine proves
housekeeping.py       background loops: expiry, live sampling, process polling
driver_guard.py       GPU driver calls off the loop, one at a time, with a deadline
cleanup_setup.py      the cleanups a lease's end owes the machine, and their handlers
needs.py              what the enabled features need from the host, checked at start
preflight.py          every refusal that needs no state, before anything is written
config_check.py       the config against the machine: unknown users and groups, slips
integrity.py          the state and socket directories checked before they are trusted
diagnostics.py        what the running daemon tells `doctor`; config warnings
hints.py              what to do next, added to the first startup errors
statelock.py          one daemon per state directory
socketwatch.py        noticing that the served socket was removed or replaced
sdnotify.py           READY/STOPPING/WATCHDOG for systemd's Type=notify and its watchdog
activation.py         the listening socket systemd passes (socket activation, LISTEN_FDS)
eventloop.py          uvloop where installed, else asyncio's loop
logformat.py          the log's formatter: what users control is escaped
"""

from __future__ import annotations

from gpuallocd.daemon.lifecycle import Daemon
from gpuallocd.daemon.main import main
from gpuallocd.daemon.settings import DaemonConfig

__all__ = ["Daemon", "DaemonConfig", "main"]
