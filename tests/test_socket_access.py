"""A user kept out of a running daemon's socket is told which group to join, not to start a
daemon (real users, a real daemon on a socket of mode 0660 and a real group)."""

from __future__ import annotations

import pwd
import subprocess
from collections.abc import Callable

from tests.harness import ThreadDaemon
from tests.system_users import SystemUsers, open_to_everyone


def guarded(start_daemon: Callable[..., ThreadDaemon], users: SystemUsers) -> ThreadDaemon:
    """A daemon whose socket only the `students` group (alice, bob) may use."""
    daemon = start_daemon(socket_group=users.name("students"), socket_mode=0o660)
    open_to_everyone(daemon.paths.root)
    return daemon


def test_a_user_outside_the_socket_group_is_told_the_group(
    start_daemon: Callable[..., ThreadDaemon], system_users: SystemUsers
) -> None:
    """carol (no group): exit 3, the socket, the group and the admin's command; no advice to
    start a daemon that runs."""
    daemon = guarded(start_daemon, system_users)
    students = system_users.name("students")
    result = system_users.ctl("carol", daemon.paths.socket, "status")
    assert result.returncode == 3, result.stderr
    assert f"permission denied on {daemon.paths.socket}: the daemon runs" in result.stderr
    assert f"you need to be in group {students}" in result.stderr
    assert f"sudo usermod -aG {students} $USER" in result.stderr
    assert "systemctl start" not in result.stderr and "Traceback" not in result.stderr
    assert system_users.ctl("alice", daemon.paths.socket, "status").returncode == 0


def test_a_user_added_to_the_group_after_logging_in_is_told_to_log_in_again(
    start_daemon: Callable[..., ThreadDaemon], system_users: SystemUsers
) -> None:
    """alice is listed in the group, but her process's groups predate it: log in again."""
    daemon = guarded(start_daemon, system_users)
    entry = pwd.getpwnam(system_users.name("alice"))
    result = subprocess.run(
        [
            system_users.python,
            "-m",
            "gpuallocd.cli",
            "--socket",
            str(daemon.paths.socket),
            "status",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        user=entry.pw_uid,
        group=entry.pw_gid,
        extra_groups=[entry.pw_gid],  # a login from before `usermod -aG`
        env={"PATH": "/usr/bin:/bin", "HOME": "/", **system_users.env},
        cwd="/",
    )
    assert result.returncode == 3, result.stderr
    students = system_users.name("students")
    assert f"you were added to group {students} after this login began" in result.stderr
    assert f"newgrp {students}" in result.stderr
