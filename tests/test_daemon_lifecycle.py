"""The daemon as systemd runs it: a separate process, signals, locks, crashes, restarts."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuallocd.errors import AlreadyRunning, ConfigError, HardwareUnavailable
from tests.harness import DaemonPaths, ProcessDaemon


def run_daemon_once(short_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Start `python -m gpuallocd ARGS` expecting it to refuse to start; its exit and output."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuallocd",
            *args,
            "--socket",
            str(short_dir / "s.sock"),
            "--state-dir",
            str(short_dir / "state"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_sigterm_stops_cleanly_and_removes_the_socket(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """SIGTERM: exit status 0, socket gone, lock released."""
    daemon = process_daemon()
    assert daemon.stop() == 0
    assert not daemon.paths.socket.exists()
    again = process_daemon()
    with again.client() as client:
        assert len(client.status()) == 4


def test_sigint_stops_cleanly(process_daemon: Callable[..., ProcessDaemon]) -> None:
    """SIGINT (Ctrl-C in a terminal) stops it the same way."""
    daemon = process_daemon()
    daemon.signal(signal.SIGINT)
    assert daemon.process is not None and daemon.process.wait(20) == 0


def test_second_daemon_on_the_same_state_dir_is_refused(
    paths: DaemonPaths, process_daemon: Callable[..., ProcessDaemon]
) -> None:
    """One daemon per state dir: the second exits 75 (AlreadyRunning) naming the holder's pid."""
    first = process_daemon()
    assert first.process is not None
    second = ProcessDaemon(DaemonPaths(paths.root), default_policy="simple")
    second.paths.socket = paths.root / "other.sock"
    second.start(wait=False)
    assert second.process is not None and second.process.wait(30) == AlreadyRunning.exit_code
    err = second.stderr()
    assert f"pid {first.process.pid}" in err and "gpuallocd.lock" in err
    assert len(err.strip().splitlines()) == 1


def test_socket_is_world_connectable_by_default(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """The socket's mode is 0666 right after bind (identity comes from the kernel)."""
    daemon = process_daemon()
    mode = stat.S_IMODE(os.stat(daemon.paths.socket).st_mode)
    assert mode == 0o666


def test_socket_mode_comes_from_config(process_daemon: Callable[..., ProcessDaemon]) -> None:
    """socket_mode in the config file sets the socket's permissions."""
    daemon = process_daemon(socket_mode=0o660)
    assert stat.S_IMODE(os.stat(daemon.paths.socket).st_mode) == 0o660


def test_kill_9_loses_no_acknowledged_lease(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """After kill -9 and a restart every acknowledged lease is there; the stale socket is
    replaced."""
    daemon = process_daemon()
    with daemon.client() as client:
        granted = [client.allocate(1).id for _ in range(3)]
    daemon.kill()
    assert daemon.paths.socket.exists()  # left behind by the crash
    restarted = process_daemon()
    with restarted.client() as client:
        assert sorted(lease.id for lease in client.leases()) == sorted(granted)
        assert len(client.allocate(1).gpus) == 1


def test_nvml_without_a_gpu_fails_with_one_clear_line(short_dir: Path) -> None:
    """--inventory nvml on a machine without NVML: exit 69, one line, how to run instead,
    and a line with the bundled examples it can run on."""
    proc = run_daemon_once(short_dir, "--inventory", "nvml")
    assert proc.returncode == HardwareUnavailable.exit_code == 69
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2, proc.stderr
    assert "NVML" in lines[0] and "--inventory" in lines[0]
    assert lines[1].startswith("gpuallocd: bundled examples (--inventory example:NAME): ")


def test_unknown_topology_file_is_a_clear_error(short_dir: Path) -> None:
    """A missing topology file: exit 69 (hardware unavailable) with the path in the message."""
    proc = run_daemon_once(short_dir, "--inventory", str(short_dir / "missing.txt"))
    assert proc.returncode == HardwareUnavailable.exit_code and "missing.txt" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_refuses_a_socket_another_daemon_serves(
    short_dir: Path, process_daemon: Callable[..., ProcessDaemon]
) -> None:
    """A second daemon with its own state dir but the same socket path does not steal it."""
    first = process_daemon()
    other = DaemonPaths(short_dir / "other")
    other.root.mkdir()
    other.socket = first.paths.socket
    second = ProcessDaemon(other, default_policy="simple").start(wait=False)
    assert second.process is not None and second.process.wait(30) == AlreadyRunning.exit_code
    assert "already serving" in second.stderr()
    with first.client() as client:
        assert len(client.status()) == 4


@pytest.mark.parametrize("bad", ['socket_mode = "rw"', "no_such_key = 1", "not toml ["])
def test_bad_config_file_is_refused(short_dir: Path, bad: str) -> None:
    """A config file with a wrong type, an unknown key or bad TOML is a one-line error, exit 78."""
    config = short_dir / "bad.toml"
    config.write_text(bad + "\n")
    proc = run_daemon_once(short_dir, "--config", str(config), "--inventory", "example:dgx1-volta")
    assert proc.returncode == ConfigError.exit_code == 78 and "config file" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
