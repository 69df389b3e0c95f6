"""A start that is refused writes nothing: no state directory, lock or ledger, no socket
directory, and no warning that reads as "starting anyway" before the refusal. Real
`python -m gpuallocd` processes; each refusal is one that needs no state to be found."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness import DEFAULT_INVENTORY, ProcessDaemon

# allowed but worth a warning: it must not be printed before a refusal
WARNED = ["--socket-group", "root", "--socket-mode", "0666"]


def start(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpuallocd` on a socket and a state directory under `root` that do not exist yet."""
    argv = [sys.executable, "-m", "gpuallocd", "--init", *WARNED]
    argv += ["--socket", str(root / "run" / "gpuallocd.sock"), "--state-dir", str(root / "state")]
    env = {k: v for k, v in os.environ.items() if k != "GPUALLOCD_SOCKET"}
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60, env=env)


def assert_nothing_written(
    root: Path, before: set[str], refused: subprocess.CompletedProcess[str]
) -> None:
    assert {p.name for p in root.iterdir()} == before, refused.stderr
    assert "limits nothing" not in refused.stderr  # the warning never came
    assert "Traceback" not in refused.stderr


def test_a_malformed_address_is_refused_before_anything_is_written(short_dir: Path) -> None:
    """A wildcard dashboard address: exit 78, nothing written."""
    refused = start(short_dir, "--inventory", DEFAULT_INVENTORY, "--dashboard-listen", "0.0.0.0:1")
    assert refused.returncode == 78
    assert_nothing_written(short_dir, set(), refused)


def test_missing_hardware_is_refused_before_anything_is_written(short_dir: Path) -> None:
    """A topology file that is not there (as NVML without a driver): exit 69."""
    refused = start(short_dir, "--inventory", str(short_dir / "no-such-topology.json"))
    assert refused.returncode == 69
    assert_nothing_written(short_dir, set(), refused)


def test_nvml_without_a_driver_is_refused_before_anything_is_written(short_dir: Path) -> None:
    """`--inventory nvml` on a machine without the NVIDIA driver: exit 69, nothing written."""
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this machine has the NVIDIA driver: NVML opens")
    refused = start(short_dir, "--inventory", "nvml")
    assert refused.returncode == 69
    assert_nothing_written(short_dir, set(), refused)


def test_a_socket_another_daemon_serves_is_refused_before_anything_is_written(
    short_dir: Path, process_daemon: Callable[..., ProcessDaemon]
) -> None:
    """A second daemon for a socket that answers, with a state directory of its own: exit
    75 naming the socket, and its state directory is not made."""
    first = process_daemon()
    second = short_dir / "second"
    second.mkdir()
    argv = [sys.executable, "-m", "gpuallocd", "--init", *WARNED, "--inventory", DEFAULT_INVENTORY]
    argv += ["--socket", str(first.paths.socket), "--state-dir", str(second / "state")]
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 75
    assert f"another daemon is already serving on {first.paths.socket}" in refused.stderr
    assert_nothing_written(second, set(), refused)
