"""Real local users for tests where identity matters, and client processes run as them.

Users are created with `useradd` when the tests run as root (as CI does) and skipped, with
the reason, otherwise. Their processes run the dependency-free client package with the
system's Python (the test environment may live where other users cannot read).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gpulease
import pytest

from tests.harness import DaemonPaths

CLIENT_DIR = str(Path(gpulease.__file__).resolve().parent.parent)
USER_NAMES = ("gahost-ana", "gahost-ben")
USERADD_NAME_IN_USE = 9  # useradd(8): "username or group name already in use"


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int


def _system_python() -> str:
    """A Python every user may run (a virtual environment may sit under root's home)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return sys.executable


def _ensure(name: str) -> LocalUser:
    """The user `name`, made if missing. Several test processes (xdist's workers, another
    checkout's run) may find it missing at once: whichever useradd comes second is told the
    name is taken (exit 9), and the user the first one made is the one to use."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        made = subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
            text=True,
        )
        if made.returncode not in (0, USERADD_NAME_IN_USE):
            raise AssertionError(f"useradd {name}: {made.stderr.strip()}") from None
        entry = pwd.getpwnam(name)
    return LocalUser(name, entry.pw_uid, entry.pw_gid)


@pytest.fixture(scope="session")
def users() -> tuple[LocalUser, LocalUser]:
    """Two unprivileged local users (created once)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create local users and run processes as them")
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed")
    ana, ben = (_ensure(name) for name in USER_NAMES)
    return ana, ben


@pytest.fixture
def open_paths(paths: DaemonPaths) -> DaemonPaths:
    """The daemon's paths, with the socket's directory reachable by every user."""
    os.chmod(paths.root, 0o755)
    return paths


def run_as(
    user: LocalUser,
    script: str,
    socket: Path,
    *args: str,
    preexec: Callable[[], None] | None = None,
    **popen: Any,
) -> subprocess.Popen[str]:
    """Start `python -c script ARGS` as `user`, with the client package importable."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(
        [_system_python(), "-c", script, *args],
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        env={"PYTHONPATH": CLIENT_DIR, "GPUALLOCD_SOCKET": str(socket), "PATH": "/usr/bin:/bin"},
        cwd="/",
        text=True,
        preexec_fn=preexec,
        **popen,
    )


@pytest.fixture
def user_processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts as other users; killed at the end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)
