"""Hostile use of the metrics: a link planted where the textfile exporter writes, and a flood
of idle connections to the metrics port, by real users against a real daemon."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.harness import DaemonPaths, ProcessDaemon, ThreadDaemon, wait_for
from tests.system_users import SystemUsers, open_to_everyone

PLANT_LINKS = """
import os, sys
target, directory, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for pid in range(first, last):
    os.symlink(target, os.path.join(directory, f".gpuallocd.prom.{pid}.tmp"))
"""

STATUS = """
import sys
from gpulease import Client
with Client(sys.argv[1], timeout=10) as c:
    print(len(c.status()))
"""


def closed_by_daemon(conn: socket.socket) -> bool:
    """Whether the daemon closed this (non-blocking) connection."""
    try:
        return conn.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_link_at_the_textfile_temporary_name_harms_no_file(
    system_users: SystemUsers,
    short_dir: Path,
    start_daemon: Callable[..., ThreadDaemon],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """alice may write the textfile directory and plants links to a root-only file at every
    name the exporter used to write first: the file keeps its bytes and its 0600 mode; the
    metrics file is a regular 0644 file of the daemon's; the start warns that the directory
    is alice's."""
    users = system_users
    open_to_everyone(short_dir)
    directory = short_dir / "textfile"
    directory.mkdir()
    os.chown(directory, users.uid("alice"), -1)
    secret = short_dir / "secret"
    secret.write_text("root only\n")
    secret.chmod(0o600)
    pid = os.getpid()
    planted = users.run(
        "alice", ["-c", PLANT_LINKS, str(secret), str(directory), str(pid - 50), str(pid + 50)]
    )
    assert planted.returncode == 0, planted.stderr
    target = directory / "gpuallocd.prom"
    start_daemon(
        default_policy="simple", metrics_textfile=str(target), sample_interval_seconds=0.05
    )
    wait_for(target.exists, 30, what="the metrics file")
    assert secret.read_text() == "root only\n"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    written = target.lstat()
    assert stat.S_ISREG(written.st_mode) and stat.S_IMODE(written.st_mode) == 0o644
    assert "gpuallocd_gpus" in target.read_text()
    assert f"its directory belongs to uid {users.uid('alice')}" in caplog.text


class LowFileLimitDaemon(ProcessDaemon):
    """The daemon with 256 open files at most (soft and hard), as a small unit would run it."""

    def command(self) -> list[str]:
        return ["prlimit", "--nofile=256:256", "--", *super().command()]


@pytest.fixture
def metered(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> Iterator[tuple[ProcessDaemon, int]]:
    """A daemon with metrics on a local port and 256 open files, open to the test users."""
    open_to_everyone(short_dir)
    port = free_port()
    daemon = LowFileLimitDaemon(paths, default_policy="simple", metrics_listen=f"127.0.0.1:{port}")
    daemon.start()
    yield daemon, port
    daemon.kill()


def flood_then_check_the_api(daemon: ProcessDaemon, port: int, users: SystemUsers) -> None:
    """1,100 idle connections to `port`: the API still answers root and alice at once; an
    idle connection is closed once its first request is late."""
    idle: list[socket.socket] = []
    try:
        for _ in range(1100):
            conn = socket.socket()
            conn.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                conn.connect(("127.0.0.1", port))
            idle.append(conn)
        with daemon.client(timeout=10) as root:
            assert len(root.status()) == 4
        done = users.run("alice", ["-c", STATUS, str(daemon.paths.socket)], timeout=30)
        assert (done.returncode, done.stdout.strip()) == (0, "4"), done.stderr
    finally:
        for conn in idle:
            conn.close()
    with socket.create_connection(("127.0.0.1", port)) as one:
        one.setblocking(False)
        wait_for(lambda: closed_by_daemon(one), 30, what="an idle connection closed")


def test_idle_metrics_connections_leave_the_api_to_users_and_root(
    metered: tuple[ProcessDaemon, int], system_users: SystemUsers
) -> None:
    """1,100 idle connections to the metrics port leave the API to alice and root; a scrape
    is answered after."""
    daemon, port = metered
    flood_then_check_the_api(daemon, port, system_users)
    url = f"http://127.0.0.1:{port}/metrics"
    scrape = subprocess.run(
        [sys.executable, "-c", f"import urllib.request as u; u.urlopen({url!r}, timeout=10)"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert scrape.returncode == 0, scrape.stderr


@pytest.fixture
def dashboarded(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> Iterator[tuple[ProcessDaemon, int]]:
    """A daemon with the dashboard on a local port and 256 open files."""
    open_to_everyone(short_dir)
    port = free_port()
    daemon = LowFileLimitDaemon(
        paths, default_policy="simple", dashboard_listen=f"127.0.0.1:{port}"
    )
    daemon.start()
    yield daemon, port
    daemon.kill()


def test_idle_dashboard_connections_leave_the_api_to_users_and_root(
    dashboarded: tuple[ProcessDaemon, int], system_users: SystemUsers
) -> None:
    """The dashboard's port is under the same rules as the metrics port."""
    daemon, port = dashboarded
    flood_then_check_the_api(daemon, port, system_users)
