"""gpuallocctl starts fast: commands load on demand."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

from gpuallocd.cli.app import COMMAND_MODULES
from tests.harness import ThreadDaemon


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
        " 'gpuallocd.cli.offline.plan', 'gpuallocd.cli.looking.status')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    assert loaded == "[]"


def test_run_loads_neither_the_local_errors_nor_the_waiting_line_nor_http_client() -> None:
    """Loading `run` and the client it uses leaves out what a plain `run` never needs."""
    loaded = python_says(
        "import sys\n"
        "from gpuallocd.cli import cli\n"
        "ctx = cli.make_context('gpuallocctl', ['run', '--', 'true'])\n"
        "cli.get_command(ctx, 'run')\n"
        "import gpulease, gpulease.renewer\n"
        "unwanted = ('gpuallocd.errors', 'gpuallocd.cli.leasing.waiting', 'gpuallocd.cli.output',"
        " 'gpuallocd.cli.style', 'http.client', 'email', 'secrets')\n"
        "print(sorted(m for m in sys.modules if m.startswith(unwanted)))"
    )
    assert loaded == "[]"


def test_the_client_models_define_their_methods_instead_of_generating_them() -> None:
    """Lease, LeasedGpu and GpuStatus carry hand-written __init__, __eq__, __hash__ and
    __repr__: `@dataclass` would compile them at every import of gpulease."""
    from gpulease import GpuStatus, Lease, LeasedGpu, models

    for model in (Lease, LeasedGpu, GpuStatus):
        for method in ("__init__", "__eq__", "__hash__", "__repr__"):
            assert getattr(model, method).__code__.co_filename == models.__file__, (model, method)


def test_run_ends_without_the_interpreters_teardown(daemon: ThreadDaemon) -> None:
    """The console entry point ends `run` at once with the command's status: an atexit
    handler, which a normal interpreter exit would call, is not called."""
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('teardown ran'))\n"
        "from gpuallocd.cli import main\n"
        f"sys.argv = ['gpuallocctl', '--socket', {str(daemon.paths.socket)!r},"
        " 'run', '--', 'sh', '-c', 'echo ran; exit 3']\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (3, "ran\n"), done.stderr
