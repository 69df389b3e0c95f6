"""gpuallocctl starts fast: commands load on demand, and a plain `run` without click."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuallocd.cli.app import COMMAND_MODULES, cli
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


def imported_by(*argv: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `python -X importtime ARGV`; the process and every module it imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, timeout=60
    )
    modules = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return done, modules


def test_a_plain_run_starts_without_click_dataclasses_or_inspect(daemon: ThreadDaemon) -> None:
    """`gpuallocctl run -n 1 -- true` leases, runs and frees without importing click, the
    commands' modules, dataclasses or inspect (a job's start pays for none of them)."""
    socket = str(daemon.paths.socket)
    done, modules = imported_by(
        "-m", "gpuallocd.cli", "--socket", socket, "run", "-n", "1", "--", "true"
    )
    assert done.returncode == 0, done.stderr
    assert "gpuallocd.cli.leasing.runner" in modules and "gpulease.lease" in modules
    unwanted = {"click", "inspect", "dataclasses", "gpuallocd.cli.app", "gpuallocd.cli.common"}
    assert modules & unwanted == set()
    with daemon.client() as client:
        assert client.leases() == []


def test_importing_the_client_loads_neither_dataclasses_nor_inspect() -> None:
    """`import gpulease` defines its models without `dataclasses` (and so without `inspect`);
    they become dataclasses when something asks."""
    loaded = python_says(
        "import sys, gpulease, gpulease.renewer\n"
        "print(sorted(m for m in ('dataclasses', 'inspect', 'ctypes', 'copy') if m in sys.modules))"
    )
    assert loaded == "[]"


# Token groups a `run` command line is made of: plain forms, and forms only click reads.
_VALUES = st.sampled_from(["0", "1", "2", "10", "01", "GPU-a", "", "a b", "-x", "né", "٣", "uuid"])
_PLAIN_GLOBAL = st.one_of(
    st.tuples(st.just("--socket"), _VALUES).map(list),
    _VALUES.map(lambda v: [f"--socket={v}"]),
    st.just(["--json"]),
)
_OTHER_GLOBAL = st.sampled_from([["--version"], ["-h"], ["-n", "1"], ["--json=1"]])
_PLAIN_RUN = st.one_of(
    st.tuples(st.sampled_from(["-n", "--count", "--gpu", "--label", "--policy"]), _VALUES).map(
        list
    ),
    st.tuples(
        st.sampled_from(["--visible", "--nested"]),
        st.sampled_from(["uuid", "index", "reuse", "new", "UUID", ""]),
    ).map(list),
    st.tuples(st.sampled_from(["-n", "--count=", "--gpu=", "--label=", "--nested="]), _VALUES).map(
        lambda pair: [pair[0] + pair[1]]
    ),
    st.tuples(st.just("--socket"), _VALUES).map(list),
    st.just(["--json"]),
)
_OTHER_RUN = st.sampled_from(
    [
        ["--wait"],
        ["--ttl", "1h"],
        ["--mig", "1g.10gb"],
        ["-h"],
        ["--memory", "20G"],
        ["--json=1"],
        ["-n"],
        ["-"],
        ["--bogus"],
        ["-n=2"],
    ]
)
_COMMAND = st.lists(
    st.sampled_from(["true", "python", "-c", "--", "x", "-n", "run"]), min_size=1, max_size=4
)


@st.composite
def run_command_lines(draw: st.DrawFn) -> list[str]:
    """Mostly plain forms of `run` (with values click may refuse), sometimes anything."""
    mixed = draw(st.integers(0, 3)) == 0
    global_tokens = st.one_of(_PLAIN_GLOBAL, _OTHER_GLOBAL) if mixed else _PLAIN_GLOBAL
    run_tokens = st.one_of(_PLAIN_RUN, _OTHER_RUN) if mixed else _PLAIN_RUN
    argv = [token for group in draw(st.lists(global_tokens, max_size=2)) for token in group]
    argv.append(draw(st.sampled_from(["run", "run", "run", "run", "shell", "status"])))
    argv += [token for group in draw(st.lists(run_tokens, max_size=5)) for token in group]
    if draw(st.booleans()):
        argv.append("--")
    return argv + draw(_COMMAND)


def click_reading(argv: list[str]) -> tuple[str, bool, list[str], dict[str, object]]:
    """What click makes of `gpuallocctl ARGV` for `run`: the socket, --json, the command,
    and the options as the command receives them. Raises where click refuses the line."""
    from gpulease.transport import resolve_socket

    from gpuallocd.cli import CliContext

    with cli.make_context("gpuallocctl", list(argv)) as ctx:
        ctx.obj = CliContext(socket=ctx.params["socket"], json=ctx.params["as_json"])
        with warnings.catch_warnings():  # click 8.2 keeps the command's name there, deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            words = [*ctx.protected_args, *ctx.args]
        name, command, args = cli.resolve_command(ctx, words)
        assert name == "run" and command is not None
        with command.make_context(name, args, parent=ctx) as sub:
            options = dict(sub.params)
            words = list(options.pop("command"))
            return resolve_socket(sub.obj.socket), sub.obj.json, words, options


@settings(max_examples=400, deadline=None)
@given(argv=run_command_lines())
def test_a_plain_run_is_read_as_click_reads_it(argv: list[str]) -> None:
    """Whatever the quick reader takes, click reads the same way: the same socket, --json,
    command and options (the quick path runs exactly what click would have run)."""
    from gpulease.transport import resolve_socket

    from gpuallocd.cli.leasing.quick_run import plain_run

    os.environ["GPUALLOCD_SOCKET"] = "/run/from-the-environment.sock"
    plain = plain_run(argv)
    if plain is None:
        return
    assert click_reading(argv) == (
        resolve_socket(plain.socket),
        plain.json,
        plain.command,
        plain.options,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--help"],
        ["--version"],
        ["run"],
        ["run", "--"],
        ["run", "-n", "1"],
        ["run", "--wait", "-n", "1", "--", "x"],
        ["run", "-n", "0", "--", "x"],
        ["run", "-n", "+1", "--", "x"],
        ["run", "--ttl", "1h", "x"],
        ["run", "--mig", "1g.10gb", "--", "x"],
        ["run", "--label", "-x", "--", "x"],
        ["run", "--visible", "UUID", "--", "x"],
        ["shell", "-n", "1"],
        ["-n", "1", "run", "x"],
        ["--", "run", "x"],
    ],
)
def test_other_command_lines_are_left_to_click(argv: list[str]) -> None:
    """Help, waiting, durations, MIG, values that look like options, anything but a plain
    run: the quick reader declines and click reads the line as before."""
    from gpuallocd.cli.leasing.quick_run import plain_run

    assert plain_run(argv) is None


def test_shell_completion_is_left_to_click() -> None:
    """With click's completion variable set, even a plain run goes to click."""
    from gpuallocd.cli.leasing.quick_run import plain_run

    assert plain_run(["run", "-n", "1", "--", "true"]) is not None
    os.environ["_GPUALLOCCTL_COMPLETE"] = "bash_complete"
    assert plain_run(["run", "-n", "1", "--", "true"]) is None


@pytest.mark.parametrize("count", ["1", "99"])
def test_a_plain_run_fails_as_the_click_path_does(
    short_dir: Path, daemon: ThreadDaemon, count: str
) -> None:
    """No daemon (exit 3), or a request the daemon refuses (exit 2): the quick path prints
    what the click path prints and exits with the same code."""
    socket = f"{short_dir}/none.sock" if count == "1" else str(daemon.paths.socket)
    argv = ["--socket", socket, "run", "-n", count, "--", "true"]
    quick = subprocess.run(
        [sys.executable, "-m", "gpuallocd.cli", *argv], capture_output=True, text=True, timeout=60
    )
    through_click = CliRunner().invoke(cli, argv)
    assert quick.returncode == through_click.exit_code == (3 if count == "1" else 2)
    assert quick.stderr == through_click.stderr and quick.stderr.startswith("Error: ")
