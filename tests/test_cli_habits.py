"""The habits people bring: durations, sizes, --version, completion, policies, eval, salloc."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpulease import parse_size

from gpuallocd.cli import cli
from gpuallocd.cli.quantities import format_duration, parse_duration
from tests.harness import ThreadDaemon


def gpuallocctl(*args: str, **options: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuallocd.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        **options,  # type: ignore[call-overload]
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("8h", 28800),
        ("2d", 172800),
        ("1w", 604800),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("3600", 3600),
        ("0.5", 0.5),
        (" 2H ", 7200),
    ],
)
def test_durations_read_as_people_write_them(text: str, seconds: float) -> None:
    """Units s, m, h, d, w, combined or with decimals, and plain seconds."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1x", "1h 2", "-5m", "soon"])
def test_what_is_not_a_duration_is_refused(text: str) -> None:
    """Nonsense is refused with a message that shows the accepted forms."""
    with pytest.raises(ValueError, match="90s, 30m, 8h, 2d"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (42, "42s"), (425, "7m05s"), (7500, "2h05m"), (273600, "3d04h")],
)
def test_durations_show_in_their_two_largest_units(seconds: float, shown: str) -> None:
    """Tables show 42s, 7m05s, 2h05m, 3d04h."""
    assert format_duration(seconds) == shown


def test_sizes_count_in_powers_of_1024() -> None:
    """20G is 20 GiB, as nvidia-smi counts memory; plain numbers are bytes."""
    assert parse_size("20G") == parse_size("20GiB") == 20 * 2**30
    assert parse_size("512M") == 512 * 2**20 and parse_size("1.5T") == int(1.5 * 2**40)
    assert parse_size("4096B") == parse_size(4096) == 4096
    with pytest.raises(ValueError, match="20G"):
        parse_size("twenty")


@pytest.mark.parametrize("text", ["20", " 20 ", "0.5"])
def test_a_size_without_a_unit_is_refused_with_a_hint(text: str) -> None:
    """`20` is not read as 20 bytes: refused, naming 20GiB, as `--ttl 0.5` is refused."""
    with pytest.raises(ValueError, match=rf"has no unit: did you mean {text.strip()}GiB\?"):
        parse_size(text)


def test_memory_without_a_unit_is_refused_by_the_cli_before_asking(daemon: ThreadDaemon) -> None:
    """`allocate --memory 20` exits 2 with the hint, and nothing is leased."""
    result = CliRunner().invoke(
        cli, ["--socket", str(daemon.paths.socket), "allocate", "--memory", "20"]
    )
    assert result.exit_code == 2
    assert "'20' has no unit: did you mean 20GiB?" in result.output
    with daemon.client() as client:
        assert client.leases() == []


def test_version_prints_the_version() -> None:
    """`gpuallocctl --version` and `-V` print the program and version."""
    from gpuallocd import __version__

    for flag in ("--version", "-V"):
        result = CliRunner().invoke(cli, [flag])
        assert result.exit_code == 0 and result.output == f"gpuallocctl, version {__version__}\n"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completion_completes_commands_and_options() -> None:
    """The script of `completion bash` loads in bash and completes `sta` and `status --w`."""
    script = gpuallocctl("completion", "bash")
    assert script.returncode == 0 and "complete " in script.stdout
    env = {**os.environ, "_GPUALLOCCTL_COMPLETE": "bash_complete"}
    for words, cword, expected in (("gpuallocctl sta", "1", "status"), (
        "gpuallocctl status --wa", "2", "--watch"
    )):  # fmt: skip
        env.update(COMP_WORDS=words, COMP_CWORD=cword)
        done = subprocess.run(
            [sys.executable, "-c", "from gpuallocd.cli import main; main()"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert f"plain,{expected}" in done.stdout.splitlines()
    loaded = subprocess.run(
        ["bash", "-c", f"{script.stdout}\ncomplete -p gpuallocctl"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert loaded.returncode == 0 and "gpuallocctl" in loaded.stdout


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_completion_scripts_for_zsh_and_fish(shell: str) -> None:
    """zsh and fish get their scripts too."""
    result = gpuallocctl("completion", shell)
    assert result.returncode == 0 and "_GPUALLOCCTL_COMPLETE" in result.stdout


def test_policies_lists_what_the_daemon_knows_with_what_each_does(daemon: ThreadDaemon) -> None:
    """`policies` names each policy the daemon accepts and says what it does."""
    result = CliRunner().invoke(cli, ["policies", "--socket", str(daemon.paths.socket)])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines()[1:]}
    assert {"simple", "best-effort", "packed", "spread"} <= set(rows)
    assert all(len(line.split()) > 1 for line in rows.values())
    local = CliRunner().invoke(cli, ["--json", "policies", "--local"])
    assert set(json.loads(local.output)["policies"]) == set(rows)


def test_allocate_export_is_evaluated_by_a_shell(daemon: ThreadDaemon) -> None:
    """eval "$(gpuallocctl allocate --export)" sets CUDA_VISIBLE_DEVICES and the lease id."""
    command = (
        f'eval "$({sys.executable} -m gpuallocd.cli allocate -n 2 --export '
        f'--socket {daemon.paths.socket})" && echo "$CUDA_VISIBLE_DEVICES $GPUALLOCD_LEASE_ID"'
    )
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    visible, lease_id = done.stdout.split()
    with daemon.client() as client:
        lease = client.lease(lease_id)
    assert visible == ",".join(lease.uuids) and lease.state == "active"
    assert f"gpuallocctl free {lease_id}" in done.stderr


def test_shell_opens_the_users_shell_under_a_lease(daemon: ThreadDaemon, tmp_path: Path) -> None:
    """`shell -n 2` runs $SHELL with the GPUs visible, frees them on exit, exits with its code."""
    fake_shell = tmp_path / "myshell"
    fake_shell.write_text('#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES"\nexit 7\n')
    fake_shell.chmod(0o755)
    done = gpuallocctl(
        "shell", "-n", "2", "--socket", str(daemon.paths.socket),
        env={**os.environ, "SHELL": str(fake_shell)},
    )  # fmt: skip
    assert done.returncode == 7, done.stderr
    assert len(done.stdout.strip().split(",")) == 2
    with daemon.client() as client:
        assert client.leases() == []
        assert client.history(limit=1)[0]["event"] == "freed"
