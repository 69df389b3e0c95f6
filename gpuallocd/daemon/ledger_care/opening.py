"""Opening the ledger at start (its files, its integrity and its schema version checked)
and its backups."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuallocd.allocator import SiteRules
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.ledger_care.backups import LedgerBackups
from gpuallocd.daemon.ledger_care.health import check_integrity, unusable_ledger
from gpuallocd.daemon.ledger_care.versions import prepare_version
from gpuallocd.daemon.startup.integrity import (
    LEDGER_COMPANIONS,
    check_ledger,
    check_state_files,
    mark_initialised,
)
from gpuallocd.errors import LedgerError
from gpuallocd.ledger import Ledger
from gpuallocd.metrics import DaemonMetrics

__all__ = ["ledger_backups", "open_ledger", "with_ledger_status"]


def open_ledger(config: DaemonConfig, initialise: bool, metrics: DaemonMetrics) -> Ledger:
    """The ledger, once its files are ours and SQLite finds it whole (else LedgerDamaged)."""
    path = config.ledger_path
    check_state_files([path, *(path.with_name(path.name + c) for c in LEDGER_COMPANIONS)])
    check_ledger(path, initialise=initialise)
    check_integrity(path)
    prepare_version(config)  # a newer ledger refused; an older one backed up, then upgraded
    try:
        ledger = Ledger(path, sync=config.ledger_sync, commit_timer=metrics.observe_commit)
    except LedgerError as exc:
        raise unusable_ledger(path, exc) from exc
    mark_initialised(path)
    return ledger


def ledger_backups(config: DaemonConfig, rules: Callable[[], SiteRules]) -> LedgerBackups:
    backups = LedgerBackups(
        config.ledger_path,
        keep=config.ledger_backups,
        interval_seconds=config.ledger_backup_interval_seconds,
        rules=rules,
    )
    backups.integrity_at_start = "ok"  # open_ledger let it through
    return backups


def with_ledger_status(
    diagnostics: Callable[[], dict[str, Any]], backups: LedgerBackups
) -> Callable[[], dict[str, Any]]:
    """The daemon's diagnostics with the ledger's (integrity at start, newest backup's age)."""
    return lambda: {**diagnostics(), "ledger": backups.status()}
