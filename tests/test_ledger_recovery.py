"""A ledger damaged on disk: the daemon refuses it in one line; `gpuallocd --recover` brings
it back without a double grant and without losing an acknowledged lease, also when the
recovery itself is killed half way."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from gpulease import GpusUnavailable

from tests.harness import DaemonPaths, ProcessDaemon, ctl_argv
from tests.ledger_damage import (
    CRASH_ENV,
    active_leases,
    carrier,
    damage,
    fill_history,
    recover,
    start_refused,
)

INVENTORY = "example:dgx1-volta"  # 8 GPUs


def test_a_damaged_ledger_stops_the_daemon_with_one_line(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """Three leases, the daemon stopped, 4 KiB of the ledger overwritten: the daemon exits 65
    with one line naming `gpuallocd --recover`: no traceback, no SQLAlchemy noise."""
    daemon = process_daemon(inventory=INVENTORY, ledger_backups=0)
    fill_history(daemon, 150)
    with daemon.client() as client:
        for _ in range(3):
            client.allocate(1)
    assert daemon.stop() == 0
    damage(daemon.paths.state_dir / "ledger.sqlite3")
    code, printed = start_refused(daemon)
    assert code == 65, printed
    lines = printed.strip().splitlines()
    assert len(lines) == 1, printed
    assert "is damaged" in lines[0] and "gpuallocd --recover" in lines[0]
    assert "Traceback" not in printed and "sqlalche" not in printed.lower()


@pytest.mark.parametrize("where", ["middle", "start"])
def test_recovery_keeps_every_acknowledged_lease_and_grants_nothing_twice(
    process_daemon: Callable[..., ProcessDaemon], paths: DaemonPaths, where: str
) -> None:
    """Two leases, a backup; a third lease whose process lives; the daemon stopped without
    a backup after it, the ledger damaged (in the middle, or at its start: then SQLite reads
    none of it). After `--recover` the first two are active on their GPUs (the backup's), the
    third too where a record of it survived (the middle); where none did (the start) the id
    its process carries proves nothing: the process is named, set aside, and its GPU is free.
    The damaged file is kept, the recovery is in the admin record, and the free GPUs are
    exactly the others."""
    daemon = process_daemon(inventory=INVENTORY, ledger_backups=3)
    fill_history(daemon, 150)
    with daemon.client() as client:
        early = [client.allocate(1), client.allocate(2)]
    backup = subprocess.run(
        ctl_argv(paths.socket, "ledger", "backup"), capture_output=True, text=True, timeout=60
    )
    assert backup.returncode == 0, backup.stderr
    daemon.kill()  # no stop backup: the third lease is newer than every backup
    later_daemon = process_daemon(inventory=INVENTORY, ledger_backups=0)
    with later_daemon.client() as client:
        late = client.allocate(1)
    holder = carrier(late.id, late.uuids)
    try:
        assert later_daemon.stop() == 0
        ledger = paths.state_dir / "ledger.sqlite3"
        damage(ledger, where=where)
        done = recover(later_daemon)
        assert done.returncode == 0, done.stderr
        assert "recovery: done" in done.stderr
        found = active_leases(ledger)
        for lease in early:
            assert found.get(lease.id, (None, None))[0] == frozenset(lease.uuids), done.stderr
        if where == "start":
            assert late.id not in found, done.stderr
            assert f"pid {holder.pid} carries GPUALLOCD_LEASE_ID={late.id}" in done.stderr
            assert "a lease granted after the backup" in done.stderr
            assert "lost:" not in done.stderr  # nothing the records know was lost
        else:
            assert found.get(late.id, (None, None))[0] == frozenset(late.uuids), done.stderr
        held = [uuid for units, _ in found.values() for uuid in units]
        assert len(held) == len(set(held)), "a GPU in two active leases"
        assert list((paths.state_dir / "damaged").iterdir()), "the damaged file was not kept"

        restarted = process_daemon(inventory=INVENTORY, ledger_backups=0)
        with restarted.client() as client:
            free = 8 - len(set(held))
            granted = client.allocate(free)
            assert not set(granted.uuids) & set(held)
            try:
                client.allocate(1)
                raise AssertionError("a ninth GPU was granted")
            except GpusUnavailable:
                pass
            actions = [a for a in client.admin_actions() if a["action"] == "recover"]
            assert len(actions) == 1 and "source:" in (actions[0]["reason"] or "")
    finally:
        holder.kill()
        holder.wait()


def test_a_second_crash_during_recovery_ends_in_the_same_state(
    process_daemon: Callable[..., ProcessDaemon], paths: DaemonPaths, short_dir: Path
) -> None:
    """`--recover` killed at its switch (the damaged log set aside, the new ledger not yet in
    place): the daemon refuses to start, and `--recover` run again ends with the same active
    leases as one clean recovery of a copy of the same damaged state."""
    daemon = process_daemon(inventory=INVENTORY, ledger_backups=2)
    fill_history(daemon, 150)
    with daemon.client() as client:
        leases = [client.allocate(1) for _ in range(3)]
    assert daemon.stop() == 0
    damage(paths.state_dir / "ledger.sqlite3")
    twin = DaemonPaths(short_dir / "twin")
    twin.root.mkdir()
    shutil.copytree(paths.state_dir, twin.state_dir)
    twin_daemon = ProcessDaemon(twin, inventory=INVENTORY, initialise=False, ledger_backups=2)

    crashed = recover(daemon, {**CRASH_ENV, "GPUALLOCD_TEST_CRASH_AT": "during-recovery"})
    assert crashed.returncode == -9, crashed.stderr
    code, printed = start_refused(daemon)
    assert code == 65 and "interrupted" in printed, printed
    assert recover(daemon).returncode == 0
    assert recover(twin_daemon).returncode == 0

    once = active_leases(twin.state_dir / "ledger.sqlite3")
    twice = active_leases(paths.state_dir / "ledger.sqlite3")
    assert twice == once
    assert {lease.id for lease in leases} <= set(once)
    restarted = process_daemon(inventory=INVENTORY, ledger_backups=0)
    with restarted.client() as client:
        assert {lease.id for lease in client.leases()} == set(once)


def test_recover_refuses_while_the_daemon_serves(
    process_daemon: Callable[..., ProcessDaemon], paths: DaemonPaths
) -> None:
    """`--recover` takes the state lock: with a daemon serving it exits 75 and changes
    nothing (no pending copy, no damaged directory, the ledger as it was)."""
    daemon = process_daemon(inventory=INVENTORY, ledger_backups=0)
    with daemon.client() as client:
        lease = client.allocate(1)
    refused = recover(daemon)
    assert refused.returncode == 75, refused.stderr
    assert not (paths.state_dir / "recovery-pending").exists()
    assert not (paths.state_dir / "damaged").exists()
    with daemon.client() as client:
        assert [held.id for held in client.leases()] == [lease.id]
