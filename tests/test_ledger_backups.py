"""Backups of the ledger: taken online, checked before they count, private, pruned; on a
timer, at a clean stop and on an admin's request; refused to everyone else."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuallocd.daemon.config.loading import load_config
from gpuallocd.errors import ConfigError
from gpuallocd.ledger.backups import quick_check, take_backup, verify_backups
from tests.harness import DaemonPaths, ThreadDaemon, ctl_argv, wait_for
from tests.ledger_damage import damage
from tests.rules_harness import daemon_with_config
from tests.system_users import SystemUsers, open_to_everyone


def backups_of(paths: DaemonPaths) -> list[Path]:
    directory = paths.state_dir / "backups"
    return sorted(directory.glob("ledger-*.sqlite3")) if directory.exists() else []


def lease_ids_in(path: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        return {row[0] for row in conn.execute("SELECT id FROM leases WHERE state = 'active'")}
    finally:
        conn.close()


def ctl(daemon: ThreadDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    argv = ctl_argv(daemon.paths.socket, *args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_an_admin_backup_is_checked_private_and_holds_the_leases(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """`gpuallocctl ledger backup` (root) writes a backup of mode 0600 that passes SQLite's
    check and holds the active lease; only `ledger_backups` of them are kept."""
    daemon = start_daemon(ledger_backups=2)
    with daemon.client() as client:
        lease = client.allocate(1)
    for _ in range(3):
        done = ctl(daemon, "ledger", "backup")
        assert done.returncode == 0, done.stderr
        assert "(checked: ok)" in done.stdout
    found = backups_of(daemon.paths)
    assert len(found) == 2
    for path in found:
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        assert quick_check(path, immutable=True) == "ok"
        assert lease_ids_in(path) == {lease.id}
    assert stat.S_IMODE(os.lstat(found[0].parent).st_mode) == 0o700
    verified = ctl(daemon, "--json", "ledger", "verify")
    assert verified.returncode == 0, verified.stderr
    answer = json.loads(verified.stdout)
    assert answer["ledger"]["check"] == "ok"
    assert [b["check"] for b in answer["backups"]] == ["ok", "ok"]


def test_verify_names_a_damaged_backup_and_fails(daemon: ThreadDaemon) -> None:
    """A backup whose pages were overwritten fails `ledger verify` (exit 1, named)."""
    assert ctl(daemon, "ledger", "backup").returncode == 0
    (path,) = backups_of(daemon.paths)
    with open(path, "r+b") as damaged:
        damaged.seek(os.path.getsize(path) // 2)
        damaged.write(os.urandom(4096))
    found = ctl(daemon, "ledger", "verify")
    assert found.returncode == 1
    assert path.name in found.stderr and "failed its check" in found.stderr


def test_a_clean_stop_takes_a_backup_and_the_timer_takes_more(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """With a one-second interval, backups appear while the daemon runs; a clean stop takes
    one more, which holds what the ledger held at the stop."""
    daemon = start_daemon(ledger_backups=50, ledger_backup_interval_seconds=1.0)
    wait_for(lambda: len(backups_of(daemon.paths)) >= 2, 60, what="two scheduled backups")
    with daemon.client() as client:
        lease = client.allocate(2)
    before = set(backups_of(daemon.paths))
    daemon.stop()
    after = set(backups_of(daemon.paths))
    newest = max(after)
    assert newest not in before
    assert lease_ids_in(newest) == {lease.id}


def test_no_backups_with_none_kept(start_daemon: Callable[..., ThreadDaemon]) -> None:
    """`ledger_backups = 0`: no backup at stop, and a request for one is refused."""
    daemon = start_daemon(ledger_backups=0)
    refused = ctl(daemon, "ledger", "backup")
    assert refused.returncode == 2 and "[invalid_request]" in refused.stderr
    daemon.stop()
    assert backups_of(daemon.paths) == []


def test_only_admins_back_up_or_verify(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """alice gets permission_denied (exit 5) for both; dave (gpuadmin) may back up."""
    users = system_users
    open_to_everyone(short_dir)
    daemon = daemon_with_config(paths, f'admin_groups = ["{users.name("gpuadmin")}"]\n').start()
    socket = daemon.paths.socket
    try:
        for command in ("backup", "verify"):
            refused = users.ctl("alice", socket, "ledger", command)
            assert refused.returncode == 5, refused.stderr
            assert "[permission_denied]" in refused.stderr
        assert backups_of(paths) == []
        done = users.ctl("dave", socket, "ledger", "backup")
        assert done.returncode == 0, done.stderr
        assert len(backups_of(paths)) == 1
    finally:
        daemon.stop()


def test_a_link_planted_as_the_backups_directory_is_refused(daemon: ThreadDaemon) -> None:
    """A link in place of `backups/` is never followed: the backup fails with ledger_error
    and nothing is written where the link points."""
    elsewhere = daemon.paths.root / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, daemon.paths.state_dir / "backups")
    refused = ctl(daemon, "ledger", "backup")
    assert refused.returncode == 1 and "[ledger_error]" in refused.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_backup_is_never_written_through_a_planted_name(tmp_path: Path) -> None:
    """The library itself: an existing file under the temporary name is refused (O_EXCL),
    and a backup that fails its check never counts."""
    ledger = tmp_path / "ledger.sqlite3"
    conn = sqlite3.connect(ledger)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.commit()
    conn.close()
    directory = tmp_path / "backups"
    directory.mkdir(mode=0o700)
    info = take_backup(ledger, directory, keep=3, now=1_800_000_000.5)
    assert info.path.name == "ledger-20270115T080000.500000Z.sqlite3"
    assert [b.check for b in verify_backups(directory)] == ["ok"]
    assert not [p for p in directory.iterdir() if p.name.startswith(".partial-")]


@pytest.mark.parametrize(
    ("key", "value"),
    [("ledger_backups", -1), ("ledger_backups", 1001), ("ledger_backup_interval_seconds", 0.5)],
)
def test_backup_settings_out_of_range_are_refused(key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config(None, environ={}, **{key: value})


def test_doctor_shows_the_ledger_check_and_the_newest_backup(daemon: ThreadDaemon) -> None:
    """Before any backup `doctor` warns with the command that takes one; after one, ok with
    the integrity check at start and the backup's age."""

    def ledger_check() -> dict[str, str]:
        found = json.loads(ctl(daemon, "--json", "doctor").stdout)
        (check,) = [c for c in found["checks"] if c["check"] == "ledger"]
        return check

    before = ledger_check()
    assert before["status"] == "warn" and "no backup yet" in before["message"]
    assert "gpuallocctl ledger backup" in before["fix"]
    assert ctl(daemon, "ledger", "backup").returncode == 0
    after = ledger_check()
    assert after["status"] == "ok", after
    assert "integrity at start: ok" in after["message"]
    assert re.search(r"newest of 1 backup\(s\) is \d+s old", after["message"]), after


def test_a_backup_of_a_damaged_ledger_never_counts(tmp_path: Path) -> None:
    """SQLite's backup copies pages as they are: a backup of a damaged ledger fails its
    check, is removed, and the good backups before it stay."""
    ledger = tmp_path / "ledger.sqlite3"
    conn = sqlite3.connect(ledger)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("CREATE TABLE history (seq INTEGER PRIMARY KEY, detail TEXT)")
    conn.executemany("INSERT INTO history (detail) VALUES (?)", [("x" * 200,)] * 2000)
    conn.commit()
    conn.close()
    directory = tmp_path / "backups"
    directory.mkdir(mode=0o700)
    good = take_backup(ledger, directory, keep=3, now=1_800_000_000.0)
    damage(ledger)
    with pytest.raises(ValueError, match="failed its check"):
        take_backup(ledger, directory, keep=3, now=1_800_000_100.0)
    assert sorted(p.name for p in directory.iterdir()) == [good.path.name]
