"""The ledger's schema version at start: a newer one refused with the way back, an older one
backed up before it is upgraded.

A ledger records its schema version (ledger/schema.py). A gpuallocd rolled back to an
earlier release would misread a ledger a later one upgraded (tables it does not know: caps
to put back, cleanups owed, request ids), so it refuses it, as PostgreSQL refuses a newer
data directory: one line naming the version found, the versions it reads, and the backup
taken before that upgrade. Before an upgrade, the daemon takes that backup in `backups/`
(where `ledger_backups` is not 0), named for the versions it spans; it is never pruned.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.ledger_care.backups import BACKUPS_DIR
from gpuallocd.daemon.startup.integrity import prepare_private_dir
from gpuallocd.errors import LedgerTooNew, StateUnusable
from gpuallocd.ledger.backups import take_upgrade_backup, way_back
from gpuallocd.ledger.migrations import stored_version
from gpuallocd.ledger.schema import SCHEMA_VERSION

__all__ = ["prepare_version", "too_new"]

log = logging.getLogger("gpuallocd")


def too_new(path: Path, found: int) -> LedgerTooNew:
    """The refusal of a ledger of schema version `found`, higher than this one reads."""
    backups = path.with_name(BACKUPS_DIR)
    back = way_back(backups, SCHEMA_VERSION)
    where = (
        f"the backup taken before that upgrade, {back}"
        if back is not None
        else f"the backup taken before that upgrade (none is in {backups})"
    )
    return LedgerTooNew(
        f"the ledger {path} has schema version {found}, written by a newer gpuallocd; this one "
        f"reads versions up to {SCHEMA_VERSION}: run the newer gpuallocd, or go back to "
        f"{where}, which lacks what was done since (docs/recovery.md)"
    )


def prepare_version(config: DaemonConfig, clock: Callable[[], float] = time.time) -> None:
    """Refuse a ledger of a newer schema; back up one of an older schema before the ledger
    opens and upgrades it. Nothing to do for a new ledger or one of this version."""
    path = config.ledger_path
    found = stored_version(path)
    if found is None or found == SCHEMA_VERSION:
        return
    if found > SCHEMA_VERSION:
        raise too_new(path, found)
    if config.ledger_backups == 0:
        log.warning(
            "upgrading the ledger from schema version %d to %d with no backup first "
            "(ledger_backups = 0): there is no way back to the earlier gpuallocd",
            found,
            SCHEMA_VERSION,
        )
        return
    directory = path.with_name(BACKUPS_DIR)
    prepare_private_dir(directory, "backups directory", 0o700)
    try:
        taken = take_upgrade_backup(path, directory, found, SCHEMA_VERSION, clock())
    except (OSError, ValueError, sqlite3.Error) as exc:
        raise StateUnusable(
            f"cannot back up the ledger {path} before upgrading it from schema version "
            f"{found} to {SCHEMA_VERSION}: {exc}; nothing was changed"
        ) from exc
    log.warning(
        "upgrading the ledger from schema version %d to %d; the way back to the earlier "
        "gpuallocd is the backup taken first: %s",
        found,
        SCHEMA_VERSION,
        taken.path,
    )
