"""Real users and groups for the tests of a shared node's rules, and a way to act as them.

As root, a session fixture creates a few users and groups with a random suffix (so tests of
several checkouts on one machine never collide) and deletes them at the end. Commands run as
those users in subprocesses, with the user's uid, primary group and supplementary groups set
by the kernel (`user=`, `group=`, `extra_groups=`), so the daemon sees them through
SO_PEERCRED exactly as it sees any user. Not root: the tests that need users skip, saying why.
"""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# short name -> supplementary groups (short names)
USERS = {
    "alice": ("students",),
    "bob": ("students", "staff"),
    "carol": (),
    "dave": ("gpuadmin",),
}
GROUPS = ("students", "staff", "gpuadmin")


def _interpreters() -> list[str]:
    """Pythons that may run this checkout for other users: this one, else the system's one of
    the same version (this one may live where other users cannot reach, a home directory)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}")
    return [c for c in dict.fromkeys(candidates) if Path(c).exists()]


def _pythonpath() -> dict[str, str]:
    """The environment that lets any of those Pythons import this checkout and its packages."""
    paths = sysconfig.get_paths()
    entries = [str(ROOT), str(ROOT / "client"), paths["purelib"], paths["platlib"]]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(entries))}


@dataclass
class SystemUsers:
    """The users and groups of one test session: `name("alice")` is the real user name."""

    suffix: str
    python: str = ""
    env: dict[str, str] = field(default_factory=dict)

    def name(self, short: str) -> str:
        return f"ga{short}{self.suffix}"

    def uid(self, short: str) -> int:
        return pwd.getpwnam(self.name(short)).pw_uid

    def run(
        self,
        short: str,
        argv: Sequence[str],
        *,
        timeout: float = 60,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `python argv...` as the user (`env`: more variables); wait for it."""
        return subprocess.run(
            [self.python, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            **self._as(short, env),
        )

    def start(
        self, short: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """Start `python argv...` as the user, its output in `log`."""
        with open(log, "w") as out:
            return subprocess.Popen(
                [self.python, *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                **self._as(short, env),
            )

    def ctl(
        self, short: str, socket: Path, *args: str, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """`gpuallocctl --socket SOCKET args...` as the user."""
        return self.run(
            short, ["-m", "gpuallocd.cli", "--socket", str(socket), *args], timeout=timeout
        )

    @contextmanager
    def renamed(self, short: str, new: str) -> Iterator[str]:
        """The user `short` renamed to `new` by `usermod -l` (a real edit of /etc/passwd),
        its name given back afterwards. usermod renames no user with a process running: one
        an earlier test signalled is given time to finish exiting first."""
        old, uid = self.name(short), self.uid(short)
        _until_no_process_of(uid)
        subprocess.run(["usermod", "-l", new, old], check=True, capture_output=True)
        try:
            yield new
        finally:
            _until_no_process_of(uid)
            subprocess.run(["usermod", "-l", old, new], check=True, capture_output=True)

    @contextmanager
    def renamed_group(self, short: str, new: str) -> Iterator[str]:
        """The group `short` renamed to `new` by `groupmod -n`, its name given back afterwards."""
        old = self.name(short)
        subprocess.run(["groupmod", "-n", new, old], check=True, capture_output=True)
        try:
            yield new
        finally:
            subprocess.run(["groupmod", "-n", old, new], check=True, capture_output=True)

    @contextmanager
    def primary_group(self, short: str, group: str) -> Iterator[str]:
        """The user `short` moved to the primary group `group` by `usermod -g`, moved back
        afterwards."""
        before = pwd.getpwnam(self.name(short)).pw_gid
        subprocess.run(["usermod", "-g", group, self.name(short)], check=True, capture_output=True)
        try:
            yield group
        finally:
            subprocess.run(
                ["usermod", "-g", str(before), self.name(short)], check=True, capture_output=True
            )

    def _as(self, short: str, more: Mapping[str, str] | None = None) -> dict[str, object]:
        entry = pwd.getpwnam(self.name(short))
        groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
        env = {"PATH": "/usr/bin:/bin", "HOME": "/", "LANG": "C.UTF-8", **self.env, **(more or {})}
        return {
            "user": entry.pw_uid,
            "group": entry.pw_gid,
            "extra_groups": groups,
            "env": env,
            "cwd": "/",
        }


def _until_no_process_of(uid: int, timeout: float = 30.0) -> None:
    """Return once no process runs as `uid` (zombies aside); fail after `timeout` seconds
    (an upper bound only), naming them."""
    deadline = time.monotonic() + timeout
    while running := _processes_of(uid):
        if time.monotonic() > deadline:
            named = {pid: _command(pid) for pid in running}
            raise AssertionError(f"uid {uid} still runs {named} after {timeout:g} s")
        time.sleep(0.05)


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "(gone)"


def _processes_of(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("Uid", "").split()[:1] == [str(uid)] and "Z" not in fields.get("State", ""):
            found.append(int(entry.name))
    return found


def _unused_suffix() -> str:
    """A suffix none of whose names is a user or group here: a run killed before its
    teardown leaves its users behind, and a later run must not trip over them."""
    while True:
        suffix = secrets.token_hex(3)
        names = [f"ga{short}{suffix}" for short in (*USERS, *GROUPS)]
        if not any(_exists(name) for name in names):
            return suffix


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        try:
            grp.getgrnam(name)
        except KeyError:
            return False
    return True


def _create(users: SystemUsers) -> None:
    for group in GROUPS:
        subprocess.run(["groupadd", users.name(group)], check=True, capture_output=True)
    for short, groups in USERS.items():
        command = ["useradd", "-M", "-s", "/usr/sbin/nologin", users.name(short)]
        if groups:
            command[1:1] = ["-G", ",".join(users.name(g) for g in groups)]
        subprocess.run(command, check=True, capture_output=True)


def _delete(users: SystemUsers) -> None:
    for short in USERS:
        subprocess.run(["userdel", users.name(short)], capture_output=True)
    for group in GROUPS:
        subprocess.run(["groupdel", users.name(group)], capture_output=True)


@pytest.fixture(scope="session")
def system_users() -> Iterator[SystemUsers]:
    """alice and bob (students; bob also staff), carol (no group), dave (gpuadmin)."""
    if os.geteuid() != 0:
        pytest.skip("creating real users and running clients as them needs root")
    if shutil.which("useradd") is None or shutil.which("groupadd") is None:
        pytest.skip("useradd/groupadd are not installed")
    users = SystemUsers(suffix=_unused_suffix(), env=_pythonpath())
    _create(users)
    try:
        users.python = _first_that_runs(users)
        yield users
    finally:
        _delete(users)


def _first_that_runs(users: SystemUsers) -> str:
    problems = []
    for python in _interpreters():
        users.python = python
        try:
            probe = users.run("carol", ["-c", "import gpulease, gpuallocd.cli"])
        except OSError as exc:
            problems.append(f"{python}: {exc.strerror}")
            continue
        if probe.returncode == 0:
            return python
        problems.append(f"{python}: {probe.stderr.strip()[-200:]}")
    pytest.skip(f"no Python that another user may run with this checkout: {problems}")


def open_to_everyone(path: Path) -> Path:
    """Let other users reach the daemon's socket inside `path` (a test's private temp dir)."""
    path.chmod(0o755)
    return path
