"""gpuallocctl starts fast: commands load on demand."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

from gpuallocd.cli.app import COMMAND_MODULES


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


def test_a_command_loads_only_its_own_module() -> None:
    """`gpuallocctl run` imports the run command, not the planning or policy code."""
    loaded = python_says(
        "import sys\n"
        "from gpuallocd.cli import cli\n"
        "ctx = cli.make_context('gpuallocctl', ['run'], resilient_parsing=True)\n"
        "cli.get_command(ctx, 'run')\n"
        "heavy = ('gpuallocd.planning', 'gpuallocd.policies', 'gpuallocd.topology',"
        " 'gpuallocd.cli.plan', 'gpuallocd.cli.status')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    assert loaded == "[]"
