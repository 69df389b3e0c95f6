"""`gpuallocd --recover`: rebuild a damaged ledger, never deleting it, and never double-book.

Run with the daemon stopped (it takes the state lock, so it refuses while one serves):

1. The damaged ledger and its write-ahead log are copied to `recovery-pending/` (fsynced;
   a `complete` marker last). While that directory exists the daemon refuses to start, and
   a later `--recover` starts again from that copy: a crash anywhere below is recovered by
   running the command again, to the same end.
2. In `recovery-work/`, a copy of that copy is salvaged and the new ledger built
   (daemon/ledger_care/rebuild.py), then checked (`PRAGMA quick_check`) and fsynced.
3. The damaged ledger's -wal and -shm are removed (their copy is pending), the new ledger is
   renamed into place, the directory fsynced.
4. `recovery-pending/` becomes `damaged/ledger-<time>/`: the damaged files are kept there,
   never deleted. `recovery-work/` is removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from gpuallocd.allocator.crash_points import arm, crash_point
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.config.wiring import allocator_settings, site_rules
from gpuallocd.daemon.ledger_care.backups import BACKUPS_DIR
from gpuallocd.daemon.ledger_care.health import PENDING_DIR
from gpuallocd.daemon.ledger_care.rebuild import Evidence, Outcome, Site, rebuild
from gpuallocd.daemon.ledger_care.versions import too_new
from gpuallocd.daemon.startup.integrity import (
    LEDGER_COMPANIONS,
    check_state_files,
    prepare_private_dir,
)
from gpuallocd.daemon.startup.statelock import StateLock
from gpuallocd.errors import HardwareUnavailable, InventoryError, NvmlError, StateUnusable
from gpuallocd.inventory import Inventory, open_inventory
from gpuallocd.ledger.backups import newest_good_backup, quick_check
from gpuallocd.ledger.migrations import stored_version
from gpuallocd.ledger.salvage import SalvageReport, read_tables
from gpuallocd.ledger.schema import SCHEMA_VERSION
from gpuallocd.processes.lease_environ import LeaseCarrier, lease_carriers

__all__ = ["recover"]

log = logging.getLogger("gpuallocd")

WORK_DIR = "recovery-work"
DAMAGED_DIR = "damaged"
COMPLETE = "complete"
WAL = "-wal"
Carriers = Callable[[], list[LeaseCarrier]]
WARNINGS = ("lost", "damaged", "held for the admins", "set aside", "unsure", "kept: lease")


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, (os.O_DIRECTORY if directory else os.O_RDONLY) | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy(source: Path, target: Path) -> None:
    """A private copy of a regular file of ours (no link followed on either side)."""
    fd_in = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fd_out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            while chunk := os.read(fd_in, 1 << 20):
                os.write(fd_out, chunk)
            found = os.fstat(fd_in)
            os.utime(fd_out, ns=(found.st_atime_ns, found.st_mtime_ns))  # when it was written
            os.fsync(fd_out)
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)


def _copy_ledger(ledger: Path, into: Path) -> None:
    """The ledger and its log (where present) into the new directory `into`."""
    into.mkdir(mode=0o700)
    for suffix in ("", WAL):
        source = ledger.with_name(ledger.name + suffix)
        if source.exists():
            _copy(source, into / source.name)


def _pending(ledger: Path) -> Path:
    """The copy of the damaged ledger this recovery starts from (made now if none is)."""
    pending = ledger.with_name(PENDING_DIR)
    if (pending / COMPLETE).exists():
        log.warning("finishing an interrupted recovery from %s", pending)
        return pending
    for stale in (pending, pending.with_name(PENDING_DIR + ".tmp")):
        shutil.rmtree(stale, ignore_errors=True)  # a copy cut short: made again
    partial = pending.with_name(PENDING_DIR + ".tmp")
    _copy_ledger(ledger, partial)
    (partial / COMPLETE).write_text(f"copied at {time.ctime()}\n")
    _fsync(partial, directory=True)
    os.rename(partial, pending)
    _fsync(ledger.parent, directory=True)
    return pending


def _evidence(
    config: DaemonConfig, opener: Callable[[str], Inventory], carriers: Carriers
) -> Evidence:
    try:
        inventory = opener(config.inventory)
    except (NvmlError, InventoryError) as exc:
        raise HardwareUnavailable(exc.message) from exc
    try:
        return Evidence(inventory.topology(), inventory.sample(), carriers())
    finally:
        inventory.close()


def _salvage(pending: Path, work: Path, name: str) -> SalvageReport:
    _copy_ledger(pending / name, work / "input")
    copy = work / "input" / name
    if not copy.exists():
        return SalvageReport(unreadable="there was no ledger file")
    return read_tables(copy)


def _switch(new: Path, ledger: Path) -> None:
    """The new ledger in place of the damaged one, whose log goes first (it is pending)."""
    for suffix in LEDGER_COMPANIONS:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(ledger.with_name(ledger.name + suffix))
    crash_point("during-recovery")  # tests only (allocator/crash_points.py)
    os.replace(new, ledger)
    _fsync(ledger.parent, directory=True)


def _keep_damaged(pending: Path, state: Path) -> Path:
    damaged = state / DAMAGED_DIR
    damaged.mkdir(mode=0o700, exist_ok=True)
    kept = damaged / time.strftime("ledger-%Y%m%dT%H%M%SZ", time.gmtime())
    while kept.exists():
        kept = kept.with_name(kept.name + "+")
    (pending / COMPLETE).unlink()
    os.rename(pending, kept)
    _fsync(damaged, directory=True)
    return kept


def _recover_locked(
    config: DaemonConfig,
    opener: Callable[[str], Inventory],
    clock: Callable[[], float],
    carriers: Carriers,
) -> Outcome:
    ledger = config.ledger_path
    state = ledger.parent
    check_state_files([ledger, *(ledger.with_name(ledger.name + c) for c in LEDGER_COMPANIONS)])
    found = stored_version(ledger)
    if found is not None and found > SCHEMA_VERSION:
        raise too_new(ledger, found)  # its rows would lose what this version does not know
    pending = _pending(ledger)
    evidence = _evidence(config, opener, carriers)
    work = state / WORK_DIR
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(mode=0o700)
    salvage = _salvage(pending, work, ledger.name)
    if (found := salvage.schema_version()) is not None and found > SCHEMA_VERSION:
        raise too_new(ledger, found)
    backup = None if salvage.complete else newest_good_backup(state / BACKUPS_DIR)
    new = work / ledger.name
    site = Site(allocator_settings(config), site_rules(config))
    outcome = rebuild(new, salvage, backup, evidence, clock(), site)
    check = quick_check(new)
    if check != "ok":
        raise StateUnusable(f"the rebuilt ledger fails its check ({check}); nothing was changed")
    _fsync(new)
    _switch(new, ledger)
    kept = _keep_damaged(pending, state)
    shutil.rmtree(work, ignore_errors=True)
    outcome.notes.append(f"kept: the damaged ledger's files in {kept}")
    return outcome


def recover(
    config: DaemonConfig,
    *,
    inventory_opener: Callable[[str], Inventory] = open_inventory,
    clock: Callable[[], float] = time.time,
    carriers: Carriers = lease_carriers,
) -> Outcome:
    """Rebuild the ledger of `config`'s state directory (the daemon stopped); log each line.

    `inventory_opener` and `carriers` (the processes carrying lease ids) are the machine's
    evidence; tests give theirs."""
    arm()
    prepare_private_dir(Path(config.state_dir), "state directory", 0o700)
    lock = StateLock(config.lock_path)
    lock.acquire(config.socket)
    try:
        outcome = _recover_locked(config, inventory_opener, clock, carriers)
    finally:
        lock.release()
    for line in outcome.lines():
        (log.warning if line.startswith(WARNINGS) else log.info)("recovery: %s", line)
    log.info("recovery: done, %d active lease(s); start the daemon as usual", outcome.active)
    return outcome
