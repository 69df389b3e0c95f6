"""gpuallocctl starts fast: commands load on demand, and `run` is read without click."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from gpuallocd.cli import cli
from gpuallocd.cli.app import COMMAND_MODULES
from gpuallocd.cli.quickrun import QuickRun, parse_quick_run
from gpuallocd.cli.runner import RunRequest


def click_reading(args: list[str]) -> QuickRun:
    """What the click command line makes of `gpuallocctl ARGS` for `run`."""
    at = args.index("run")
    ctx = cli.make_context("gpuallocctl", args[: at + 1])
    command = cli.get_command(ctx, "run")
    assert command is not None
    params = command.make_context("run", args[at + 1 :], parent=ctx).params
    return QuickRun(
        socket=ctx.params["socket"],
        json=ctx.params["as_json"],
        request=RunRequest(
            command=tuple(params["command"]),
            count=params["count"],
            gpus=tuple(params["gpus"]),
            policy=params["policy"],
            ttl=params["ttl"],
            label=params["label"],
            wait=params["wait"],
            timeout=params["timeout"],
            visible=params["visible"],
        ),
    )


def test_every_command_is_mapped_to_the_module_that_defines_it() -> None:
    """The lazy group's map names each module's commands, and nothing else."""
    defined = {
        command.name: module
        for module in set(COMMAND_MODULES.values())
        for command in importlib.import_module(module).COMMANDS
    }
    assert defined == COMMAND_MODULES


def python_says(code: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "GPUALLOCD_SOCKET"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environ
    )
    return done.stdout.strip()


def test_importing_the_cli_package_loads_no_click() -> None:
    """`import gpuallocd.cli` (what the console script does first) imports neither click nor
    any command."""
    loaded = python_says(
        "import sys, gpuallocd.cli; "
        "print(sorted(m for m in sys.modules if m == 'click' or m.startswith('gpuallocd.')))"
    )
    assert loaded == "['gpuallocd.cli']"


def test_a_plain_run_is_read_and_launched_without_click_or_the_planning_code() -> None:
    """The quick path of `run` imports no click, no subprocess, no planning, no policies."""
    loaded = python_says(
        "import sys\n"
        "from gpuallocd.cli.quickrun import parse_quick_run\n"
        "import gpuallocd.cli.quickmain\n"
        "assert parse_quick_run(['run', '-n', '1', '--', 'true']) is not None\n"
        "heavy = ('click', 'subprocess', 'gpuallocd.planning', 'gpuallocd.policies',"
        " 'gpuallocd.topology')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    assert loaded == "[]"


@pytest.mark.parametrize(
    "args",
    [
        ["run", "true"],
        ["run", "--", "true"],
        ["run", "-n", "2", "--", "python", "-c", "pass"],
        ["run", "-n2", "python", "--count", "9"],
        ["--json", "--socket", "/tmp/x.sock", "run", "--count=3", "--wait", "--", "a", "--", "b"],
        ["--socket=/s", "run", "--gpu", "0", "--gpu", "GPU-x", "--policy", "spread", "cmd"],
        ["run", "--ttl", "30", "--timeout", "2.5", "--label", "", "--visible", "index", "x"],
        ["run", "--label", "-n", "--policy=", "-", "y"],
        ["run", "-n", "1", "-n", "4", "--visible=uuid", "z"],
    ],
)
def test_the_quick_reader_agrees_with_click(args: list[str]) -> None:
    """Where the quick reader reads a `run`, click reads the same request."""
    quick = parse_quick_run(args)
    assert quick is not None
    assert quick == click_reading(args)


@pytest.mark.parametrize(
    "args",
    [
        ["run"],
        ["run", "--"],
        ["run", "--help"],
        ["--help", "run", "x"],
        ["run", "-n", "0", "x"],
        ["run", "-n", "two", "x"],
        ["run", "--ttl", "1e3", "x"],
        ["run", "--ttl", ".5", "x"],
        ["run", "--timeout", "1.", "x"],
        ["run", "-n", "\u0661", "x"],  # a digit to int(), not to the quick reader
        ["run", "--ttl", "0", "x"],
        ["run", "--visible", "name", "x"],
        ["run", "--wait=yes", "x"],
        ["run", "--no-such-option", "x"],
        ["run", "-n"],
        ["--socket"],
        ["status"],
        ["leases", "run"],
    ],
)
def test_the_quick_reader_leaves_everything_else_to_click(args: list[str]) -> None:
    """Help, other commands and values it does not accept go to click, with its messages."""
    assert parse_quick_run(args) is None


def test_the_socket_comes_from_the_environment_like_clicks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GPUALLOCD_SOCKET is the socket when --socket is not given, as for the click group."""
    monkeypatch.setenv("GPUALLOCD_SOCKET", "/tmp/from-env.sock")
    args = ["run", "-n", "1", "true"]
    quick = parse_quick_run(args)
    assert quick is not None and quick.socket == "/tmp/from-env.sock"
    assert quick == click_reading(args)
