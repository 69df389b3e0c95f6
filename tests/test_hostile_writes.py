"""Hostile use of what root writes where a user can reach: `gpuallocctl usage --plot FILE`
run by root into a directory of alice's, against a real daemon, alice's links planted as
alice; and a browser that draws nothing is never reported as a file written."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuallocd.host.files import write_file
from tests.harness import ThreadDaemon, ctl_argv
from tests.system_users import SystemUsers, open_to_everyone

PLANT = "import os, sys; os.symlink(sys.argv[1], sys.argv[2])"


def _alices_directory(users: SystemUsers, short_dir: Path) -> tuple[Path, Path]:
    """A directory alice owns, and a root-only file outside it."""
    open_to_everyone(short_dir)
    directory = short_dir / "alice"
    directory.mkdir()
    os.chown(directory, users.uid("alice"), -1)
    secret = short_dir / "secret"
    secret.write_text("root only\n")
    secret.chmod(0o600)
    return directory, secret


def _plot(daemon: ThreadDaemon, target: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ctl_argv(daemon.paths.socket, "usage", "--since", "1d", "--plot", str(target)),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


@pytest.mark.parametrize(
    "name",
    [
        "usage.svg",
        pytest.param(
            "usage.png",
            marks=pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium"),
        ),
    ],
)
def test_a_link_at_the_plot_file_is_refused(
    system_users: SystemUsers,
    short_dir: Path,
    start_daemon: Callable[..., ThreadDaemon],
    name: str,
) -> None:
    """alice links FILE in her directory to a root-only file; root's `usage --plot FILE` is
    refused, naming the link, and the root-only file keeps its bytes and mode."""
    directory, secret = _alices_directory(system_users, short_dir)
    target = directory / name
    planted = system_users.run("alice", ["-c", PLANT, str(secret), str(target)])
    assert planted.returncode == 0, planted.stderr
    daemon = start_daemon(default_policy="simple")
    with daemon.client() as client:
        client.allocate(1)
    done = _plot(daemon, target)
    assert done.returncode != 0 and "wrote" not in done.stdout
    assert "symbolic link" in done.stderr
    assert secret.read_text() == "root only\n"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert target.is_symlink()


def test_a_plot_the_browser_did_not_draw_is_an_error(
    short_dir: Path, start_daemon: Callable[..., ThreadDaemon]
) -> None:
    """A browser that exits 0 but writes no PNG (an old usage.png already there): the command
    fails saying so, never "wrote", and the old file is left as it was."""
    browser_dir = short_dir / "bin"
    browser_dir.mkdir()
    browser = browser_dir / "chromium"
    browser.write_text("#!/bin/sh\nexit 0\n")
    browser.chmod(0o755)
    target = short_dir / "usage.png"
    target.write_bytes(b"an old chart")
    daemon = start_daemon(default_policy="simple")
    done = _plot(daemon, target, PATH=f"{browser_dir}:{os.environ['PATH']}")
    assert done.returncode != 0 and "wrote" not in done.stdout
    assert "drew no PNG" in done.stderr
    assert target.read_bytes() == b"an old chart"


def test_a_plot_replaces_a_file_with_one_of_roots(
    short_dir: Path, start_daemon: Callable[..., ThreadDaemon]
) -> None:
    """A regular file at FILE is replaced (a new file, not written through: a hard link to
    it keeps its bytes), and "wrote" is said with the file there."""
    target = short_dir / "usage.svg"
    target.write_text("old\n")
    other = short_dir / "other-name"
    os.link(target, other)
    daemon = start_daemon(default_policy="simple")
    done = _plot(daemon, target)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {target}"
    assert target.read_text().startswith("<svg")
    assert other.read_text() == "old\n"


def test_roots_writer_replaces_a_link_and_leaves_nothing_behind(
    system_users: SystemUsers, short_dir: Path
) -> None:
    """The one writer of files others may reach (`host/files.py`, as the CDI spec, the
    metrics textfile and the notifier use it): alice's link at the name is replaced, never
    followed, the file has its mode whatever root's umask; where the name cannot be replaced
    (alice put a directory there) it fails and leaves no temporary file."""
    directory, secret = _alices_directory(system_users, short_dir)
    target = directory / "gpuallocd.json"
    planted = system_users.run("alice", ["-c", PLANT, str(secret), str(target)])
    assert planted.returncode == 0, planted.stderr
    before = os.umask(0o077)
    try:
        write_file(target, b"{}\n", 0o644, durable=True)
    finally:
        os.umask(before)
    assert secret.read_text() == "root only\n" and not target.is_symlink()
    assert target.read_bytes() == b"{}\n" and stat.S_IMODE(target.stat().st_mode) == 0o644
    taken = directory / "taken.json"
    made = system_users.run("alice", ["-c", f"import os; os.mkdir({str(taken)!r})"])
    assert made.returncode == 0, made.stderr
    with pytest.raises(OSError):
        write_file(taken, b"{}\n", 0o644)
    assert sorted(p.name for p in directory.iterdir()) == ["gpuallocd.json", "taken.json"]
