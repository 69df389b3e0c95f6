"""Hostile use of identity, round three: a connection opened before a group change keeps no
rights the change took away, and a process's own gid sheds no group of the user's."""

from __future__ import annotations

import grp
import os
import pwd
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.system_users import SystemUsers, open_to_everyone

# Drain on one connection, wait for the test's word, then drain again on the same connection.
TWO_DRAINS = """
import os, sys, time
from gpulease import Client, GpuallocError
go = sys.argv[2]
with Client(sys.argv[1]) as c:
    c.drain([3], "first")
    print("first ok", flush=True)
    while not os.path.exists(go):
        time.sleep(0.02)
    try:
        c.drain([2], "second")
        print("second ok", flush=True)
    except GpuallocError as e:
        print("second", e.code, flush=True)
"""

ALLOCATE = """
import sys
from gpulease import Client, GpuallocError
try:
    with Client(sys.argv[1]) as c:
        print(len(c.allocate(int(sys.argv[2])).gpus))
except GpuallocError as e:
    print(e.code, e.details)
"""


@pytest.fixture
def daemon(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> Iterator[ProcessDaemon]:
    """`python -m gpuallocd` with gpuadmin as the admin group and a 1-GPU limit on alice's
    primary group, its socket open to the test users."""
    users = system_users
    open_to_everyone(short_dir)
    daemon = ProcessDaemon(paths, default_policy="simple")
    primary = grp.getgrgid(pwd.getpwnam(users.name("alice")).pw_gid).gr_name
    with open(daemon.config_file, "a") as config:
        config.write(f'admin_groups = ["{users.name("gpuadmin")}"]\n')
        config.write(f"[limits.group.{primary}]\nmax_gpus = 1\n")
    daemon.start()
    yield daemon
    daemon.kill()


def test_a_reload_reaches_a_connection_opened_before_it(
    daemon: ProcessDaemon, system_users: SystemUsers, short_dir: Path
) -> None:
    """dave drains on a connection; he is taken out of gpuadmin and the daemon reloaded; his
    next drain on that same connection is `permission_denied`."""
    users = system_users
    go, log = short_dir / "go", short_dir / "dave.log"
    dave = users.start("dave", ["-c", TWO_DRAINS, str(daemon.paths.socket), str(go)], log)
    try:
        wait_for(lambda: "first ok" in log.read_text(), 30, what="the first drain")
        subprocess.run(
            ["gpasswd", "-d", users.name("dave"), users.name("gpuadmin")],
            check=True,
            capture_output=True,
        )
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: "reloaded" in daemon.stderr(), 30, what="the reload")
        go.touch()
        assert dave.wait(30) == 0
        assert log.read_text().splitlines()[-1] == "second permission_denied"
        with daemon.client() as root:
            assert [s.state for s in root.status()][2:4] == ["free", "drained"]
    finally:
        subprocess.run(
            ["gpasswd", "-a", users.name("dave"), users.name("gpuadmin")], capture_output=True
        )
        if dave.poll() is None:
            dave.kill()
            dave.wait(10)


def test_a_process_gid_does_not_shed_the_primary_groups_limit(
    daemon: ProcessDaemon, system_users: SystemUsers
) -> None:
    """alice's primary group (the user database's) allows 1 GPU. Run as `sg students`
    would run her (gid students), she is still held to it: 3 GPUs are refused."""
    users = system_users
    entry = pwd.getpwnam(users.name("alice"))
    students = grp.getgrnam(users.name("students")).gr_gid
    done = subprocess.run(
        [users.python, "-c", ALLOCATE, str(daemon.paths.socket), "3"],
        capture_output=True,
        text=True,
        timeout=60,
        user=entry.pw_uid,
        group=students,
        extra_groups=os.getgrouplist(entry.pw_name, entry.pw_gid),
        env={"PATH": "/usr/bin:/bin", "HOME": "/", **users.env},
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("quota_exceeded"), done.stdout
    with daemon.client() as root:
        shown = root.limits(users.name("alice"))
        assert {e["limit"]: e["value"] for e in shown["limits"]}["max_gpus"] == 1
        assert root.leases() == []
