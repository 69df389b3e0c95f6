"""Cleanups that fail are retried until done, across a restart: alice's ACL entry on the
device file of GPU 3 is owed from the end of her lease (a row written with the end), and
the file cannot take an ACL at first (it is a link to a /proc file: setxattr fails with
EOPNOTSUPP for real) until the test puts the device node back."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from gpuallocd.enforcement.acl import read_acl
from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.system_users import SystemUsers, open_to_everyone

NVIDIA_MAJOR = 195
INVENTORY = "nvml-recording:dgx-a100-mig"


@pytest.fixture
def devices(paths: DaemonPaths) -> Path:
    """`nvidia0`..`nvidia7` in a directory of the test, closed to users (0600, root)."""
    open_to_everyone(paths.root)
    directory = paths.root / "dev"
    directory.mkdir(mode=0o755)
    for minor in range(8):
        node = directory / f"nvidia{minor}"
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
    return directory


@pytest.fixture
def daemons(paths: DaemonPaths, devices: Path) -> Iterator[list[ProcessDaemon]]:
    started: list[ProcessDaemon] = []
    yield started
    for daemon in started:
        daemon.stop()


def start(paths: DaemonPaths, devices: Path, started: list[ProcessDaemon]) -> ProcessDaemon:
    daemon = ProcessDaemon(
        paths, inventory=INVENTORY, device_access="acl", device_dir=str(devices)
    ).start()
    started.append(daemon)
    return daemon


class Unsettable:
    """GPU 3's device node swapped for a link to a /proc file: never written through."""

    def __init__(self, devices: Path) -> None:
        self.node = devices / "nvidia3"
        self.aside = devices / ".nvidia3.aside"
        os.rename(self.node, self.aside)
        os.symlink("/proc/version", self.node)

    def put_back(self) -> None:
        os.replace(self.aside, self.node)


def pending(daemon: ProcessDaemon) -> list[dict[str, Any]]:
    with daemon.client() as client:
        found: list[dict[str, Any]] = client.diagnostics()["pending_cleanups"]
    return found


def leased_and_freed_by_alice(
    daemon: ProcessDaemon, users: SystemUsers, devices: Path
) -> tuple[int, Unsettable]:
    """Alice's lease on GPU 3 (her entry on nvidia3), then its end while nvidia3 takes no
    ACL: the cleanup has failed once. Alice's uid and the swapped node."""
    socket = daemon.paths.socket
    granted = users.ctl("alice", socket, "allocate", "--gpu", "3")
    assert granted.returncode == 0, granted.stderr
    alice = users.uid("alice")
    assert alice in read_acl(str(devices / "nvidia3")).users()
    swapped = Unsettable(devices)
    freed = users.ctl("alice", socket, "free", "--mine")
    assert freed.returncode == 0, freed.stderr
    wait_for(lambda: [c["attempts"] for c in pending(daemon)] == [1], 30, what="a failure")
    (owed,) = pending(daemon)
    assert owed["kind"] == "device_acl" and owed["target"] == str(swapped.node)
    assert "not a character device" in owed["last_error"]  # a link is never written through
    return alice, swapped


def test_a_failed_acl_removal_is_retried_until_done(
    paths: DaemonPaths, devices: Path, daemons: list[ProcessDaemon], system_users: SystemUsers
) -> None:
    """The end of alice's lease owes the removal of her entry; it fails while nvidia3 takes
    no ACL, and is done at a later try once it does: her entry is gone, nothing is owed."""
    daemon = start(paths, devices, daemons)
    alice, swapped = leased_and_freed_by_alice(daemon, system_users, devices)
    swapped.put_back()
    wait_for(lambda: pending(daemon) == [], timeout=30, what="the cleanup done")
    assert alice not in read_acl(str(swapped.node)).users()
    assert "cleanup done after 1 failed attempt(s): device_acl" in daemon.stderr()


def test_a_pending_cleanup_is_finished_after_a_crash(
    paths: DaemonPaths, devices: Path, daemons: list[ProcessDaemon], system_users: SystemUsers
) -> None:
    """The daemon is killed (-9) while the removal is owed: the row is in the ledger on disk,
    and the next daemon finishes it."""
    daemon = start(paths, devices, daemons)
    alice, swapped = leased_and_freed_by_alice(daemon, system_users, devices)
    daemon.kill()
    with closing(sqlite3.connect(paths.state_dir / "ledger.sqlite3")) as db, db:
        rows = db.execute("SELECT kind, target, attempts FROM pending_cleanups").fetchall()
    assert rows == [("device_acl", str(swapped.node), 1)]
    swapped.put_back()
    again = start(paths, devices, daemons)
    wait_for(lambda: pending(again) == [], timeout=30, what="the cleanup done")
    assert alice not in read_acl(str(swapped.node)).users()
    assert "cleanup done after 1 failed attempt(s): device_acl" in again.stderr()
