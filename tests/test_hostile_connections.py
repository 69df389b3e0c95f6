"""Case 2: one user's flood of idle connections never keeps another user from being served."""

from __future__ import annotations

import resource
import subprocess
from collections.abc import Callable

from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.local_users import LocalUser, run_as
from tests.rawhttp import connect

FLOOD = 1100
OPEN_FILES = 1024  # systemd's default soft limit

FLOOD_SCRIPT = """
import socket, sys
held = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sys.argv[2])
    except OSError:
        s.close()
        continue
    held.append(s)
print(len(held), flush=True)
sys.stdin.read()
"""

ALLOCATE_SCRIPT = """
import gpulease
with gpulease.Client(timeout=20) as client:
    lease = client.allocate(1)
    print(lease.user, len(lease.gpus), flush=True)
"""


class LimitedDaemon(ProcessDaemon):
    """The daemon under an open-file limit, as a unit without LimitNOFILE= would give it."""

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={OPEN_FILES}:{OPEN_FILES}", "--", *super().command()]


def _more_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))


def test_a_flood_by_one_user_leaves_the_daemon_to_the_others(
    users: tuple[LocalUser, LocalUser],
    open_paths: DaemonPaths,
    user_processes: list[subprocess.Popen[str]],
) -> None:
    """1,100 idle connections of one user under a 1,024-file limit: another user and root are
    served, the flood is capped per user, and the log says so in a line or two."""
    ana, ben = users
    daemon = LimitedDaemon(open_paths, default_policy="simple", max_connections_per_user=32)
    daemon.start()
    try:
        flood = run_as(
            ana,
            FLOOD_SCRIPT,
            open_paths.socket,
            str(FLOOD),
            str(open_paths.socket),
            preexec=_more_files,
            stdin=subprocess.PIPE,
        )
        user_processes.append(flood)
        assert flood.stdout is not None
        assert int(flood.stdout.readline()) > 0  # it connected as many as it could
        served = run_as(ben, ALLOCATE_SCRIPT, open_paths.socket)
        out, err = served.communicate(timeout=60)
        assert served.returncode == 0, err
        assert out.split() == [ben.name, "1"]
        with daemon.client(timeout=20) as client:
            assert len(client.status()) == 4
    finally:
        daemon.stop()
    log = daemon.stderr()
    assert "Traceback" not in log
    assert 1 <= log.count("refused a connection of uid") <= 2


def test_a_connection_that_sends_nothing_is_closed(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """A connection whose request head does not come within the head timeout is closed."""
    daemon = process_daemon(request_head_timeout_seconds=0.5)
    with connect(daemon.paths.socket, timeout=30) as sock:
        assert sock.recv(1) == b""  # closed by the daemon, well before our own timeout
    with daemon.client() as client:
        wait_for(lambda: len(client.status()) == 4, timeout=10)
