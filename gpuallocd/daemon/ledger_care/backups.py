"""The ledger's backups in the running daemon: on a timer, at every clean stop, and on an
admin's request (`gpuallocctl ledger backup|verify`, through the API).

Backups go to `state_dir/backups/` (created 0700 and checked like the state directory:
ours, writable by nobody else, not a link), `ledger_backups` of them kept, one every
`ledger_backup_interval_seconds` (the first one interval after start). Each is taken off
the event loop, from a connection of its own (ledger/backups.py); the API keeps answering
meanwhile. One backup runs at a time. A failed backup is logged and never counts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuallocd.allocator import SiteRules
from gpuallocd.daemon.startup.integrity import prepare_private_dir
from gpuallocd.errors import InvalidRequest, LedgerError, StateUnusable
from gpuallocd.ledger.backups import (
    BackupInfo,
    list_backups,
    quick_check,
    take_backup,
    verify_backups,
)
from gpuallocd.model import Caller

__all__ = ["BACKUPS_DIR", "LedgerBackups"]

log = logging.getLogger(__name__)

BACKUPS_DIR = "backups"


class LedgerBackups:
    """Takes, prunes and checks the ledger's backups; the API's `LedgerAdmin`."""

    def __init__(
        self,
        ledger_path: Path,
        *,
        keep: int,
        interval_seconds: float,
        rules: Callable[[], SiteRules],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`rules`: the site rules in force (who is an admin; they change on SIGHUP)."""
        self.ledger_path = ledger_path
        self.directory = ledger_path.with_name(BACKUPS_DIR)
        self._keep = keep
        self._interval = interval_seconds
        self._rules = rules
        self._clock = clock
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.integrity_at_start = "unchecked"

    async def start(self) -> None:
        if self._keep > 0:
            self._task = asyncio.create_task(self._forever())

    async def stop(self) -> None:
        """Stop the timer, then take the clean stop's backup."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._keep > 0:
            await self._logged_backup("at stop")

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self._logged_backup("scheduled")

    async def _logged_backup(self, why: str) -> BackupInfo | None:
        try:
            info = await self._take()
        except LedgerError as exc:
            log.error("the %s ledger backup failed: %s", why, exc.message)
            return None
        log.info("ledger backup (%s): %s, %d bytes, checked ok", why, info.path, info.size_bytes)
        return info

    async def _take(self) -> BackupInfo:
        async with self._lock:
            try:
                prepare_private_dir(self.directory, "backups directory", 0o700)
                return await asyncio.to_thread(
                    take_backup, self.ledger_path, self.directory, self._keep, self._clock()
                )
            except StateUnusable as exc:
                raise LedgerError(exc.message) from exc
            except (OSError, ValueError, Exception) as exc:  # sqlite3.Error among them
                raise LedgerError(f"cannot back up the ledger: {exc}") from exc

    # The API's LedgerAdmin ------------------------------------------------------------------

    async def backup(self, caller: Caller) -> dict[str, Any]:
        self._rules().require_admin(caller, "back up the ledger")
        if self._keep == 0:
            raise InvalidRequest("ledger backups are off (ledger_backups = 0)")
        info = await self._take()
        log.info("ledger backup for %s: %s", caller.user, info.path)
        return {"backup": info.to_json(), "directory": str(self.directory)}

    async def verify(self, caller: Caller) -> dict[str, Any]:
        self._rules().require_admin(caller, "verify the ledger and its backups")
        async with self._lock:
            ledger = await asyncio.to_thread(quick_check, self.ledger_path)
            backups = await asyncio.to_thread(verify_backups, self.directory)
        return {
            "ledger": {"path": str(self.ledger_path), "check": ledger},
            "directory": str(self.directory),
            "backups": [b.to_json() for b in backups],
        }

    def status(self) -> dict[str, Any]:
        """For `doctor`: the check at start, and the newest backup's age (unchecked here)."""
        try:
            found = list_backups(self.directory)
        except OSError:
            found = []
        newest = found[-1].taken_at if found else None
        return {
            "integrity_at_start": self.integrity_at_start,
            "backups_kept": self._keep,
            "backup_interval_seconds": self._interval,
            "backups": len(found),
            "newest_backup_age_seconds": None if newest is None else self._clock() - newest,
        }
