"""Whether the ledger may be served from: SQLite's check at start, an unfinished recovery.

A ledger that fails `PRAGMA quick_check` (or that SQLite cannot read: "database disk image
is malformed", "file is not a database") is never served: its leases may be half gone, and
serving would grant their GPUs again. The daemon refuses with one line naming the recovery
command (LedgerDamaged, exit 65); the SQLite error's text is given, never SQLAlchemy's.
A recovery that was interrupted (its copy of the damaged ledger is still pending) stops the
daemon the same way: the file in place may lack what the damaged one's log held.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gpuallocd.errors import LedgerDamaged, LedgerError, StateUnusable
from gpuallocd.ledger.backups import quick_check

__all__ = ["PENDING_DIR", "RECOVER_COMMAND", "check_integrity", "damaged", "unusable_ledger"]

RECOVER_COMMAND = "gpuallocd --recover"
PENDING_DIR = "recovery-pending"  # in the state directory: a recovery's copy of the input


def damaged(path: Path, why: str) -> LedgerDamaged:
    return LedgerDamaged(
        f"the ledger {path} is damaged ({why}); no GPU is served from it: stop here, keep the "
        f"file, and run `{RECOVER_COMMAND}` with the same options (docs/recovery.md)"
    )


def check_integrity(path: Path) -> str:
    """ "ok", or LedgerDamaged. Nothing to check where there is no ledger yet."""
    pending = path.with_name(PENDING_DIR)
    if pending.exists():
        raise LedgerDamaged(
            f"a recovery of the ledger {path} was interrupted ({pending} is still there); "
            f"run `{RECOVER_COMMAND}` again to finish it (docs/recovery.md)"
        )
    if not path.exists() or path.stat().st_size == 0:
        return "ok"
    found = quick_check(path)
    if found != "ok":
        raise damaged(path, found)
    return found


def unusable_ledger(path: Path, exc: LedgerError) -> StateUnusable:
    """The startup error for a ledger that would not open: damaged where SQLite says so."""
    cause = exc.__cause__
    orig = getattr(cause, "orig", None)
    if isinstance(orig, sqlite3.DatabaseError) and not isinstance(orig, sqlite3.OperationalError):
        return damaged(path, str(orig))
    if isinstance(orig, sqlite3.Error):
        return StateUnusable(f"cannot open the ledger {path}: {orig}")
    return StateUnusable(exc.message)
