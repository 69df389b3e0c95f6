"""Errors for the first mistakes people make say the fix, and the fix works."""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuallocd.cli import cli
from gpuallocd.errors import HardwareUnavailable, StateUnusable
from gpuallocd.topology import example_names
from tests.harness import wait_until_serving

NOBODY = 65534


def gpuallocd(*args: str, **options: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuallocd", *args],
        capture_output=True,
        text=True,
        timeout=60,
        **options,  # type: ignore[call-overload]
    )


def nvml_loads() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(nvml_loads(), reason="this machine has NVML: plain gpuallocd would serve")
def test_plain_gpuallocd_without_gpus_lists_the_bundled_examples(short_dir: Path) -> None:
    """`gpuallocd` with the default inventory on a machine without GPUs names every example."""
    done = gpuallocd("--socket", str(short_dir / "s.sock"), "--state-dir", str(short_dir / "st"))
    assert done.returncode == HardwareUnavailable.exit_code
    assert f"--inventory example:NAME): {', '.join(example_names())}" in done.stderr


def test_a_bare_example_name_suggests_the_example_prefix(short_dir: Path) -> None:
    """`--inventory workstation-4gpu-nvbridge` asks: did you mean example:...?"""
    done = gpuallocd(
        "--inventory", "workstation-4gpu-nvbridge",
        "--socket", str(short_dir / "s.sock"), "--state-dir", str(short_dir / "st"),
    )  # fmt: skip
    assert done.returncode == HardwareUnavailable.exit_code
    assert "did you mean `example:workstation-4gpu-nvbridge`" in done.stderr
    typo = CliRunner().invoke(cli, ["plan", "--topology", "example:dgx-a10", "-n", "2"])
    assert "did you mean `example:dgx-a100`?" in typo.output


def test_no_daemon_says_how_to_start_one(short_dir: Path) -> None:
    """gpuallocctl without a daemon: exit 3, and how to start the service or a trial one."""
    result = CliRunner().invoke(cli, ["status", "--socket", str(short_dir / "none.sock")])
    assert result.exit_code == 3
    assert "sudo systemctl start gpuallocd" in result.output
    assert "gpuallocd --inventory example:" in result.output


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run the daemon as a normal user",
)
def test_a_normal_user_is_told_which_paths_to_give_and_they_work(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a normal user the default paths are refused with the options to give; given, it serves.

    The client here runs as root and trusts a daemon run by `nobody` only when told to.
    """
    monkeypatch.setenv("GPUALLOCD_SERVER_UID", "nobody")
    home = short_dir / "home"
    short_dir.chmod(0o755)  # mkdtemp made it 0700: nobody could not reach what is inside
    for place in (home / "run", home / "state"):
        place.mkdir(parents=True)
        os.chown(place, NOBODY, NOBODY)
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": str(home / "run"),
        "XDG_STATE_HOME": str(home / "state"),
    }
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    refused = subprocess.run(
        [*as_nobody, sys.executable, "-m", "gpuallocd", "--inventory", "example:dgx2"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert refused.returncode == StateUnusable.exit_code, refused.stderr
    hinted = re.search(
        r"give paths you may write: gpuallocd (--socket \S+ --state-dir \S+)", refused.stderr
    )
    assert hinted is not None, refused.stderr
    options = shlex.split(hinted.group(1))
    assert options[1] == f"{home}/run/gpuallocd.sock"
    served = subprocess.Popen(
        [*as_nobody, sys.executable, "-m", "gpuallocd", "--inventory", "example:dgx2", *options],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until_serving(Path(options[1]))
    finally:
        served.terminate()
        served.wait(30)
