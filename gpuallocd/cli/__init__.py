"""The `gpuallocctl` command line, in rooms as docs/cli.md groups the commands.

    leasing/        allocate, run, renew, free, revoke, adopt
    looking/        status, queue, history, limits, usage
    administering/  drain, reserve, doctor, topology, slurm-gres
    offline/        plan, simulate, policy-bench, completion, policies
    notifying/      notify (channels, thresholds, feed), notify-agent

The shell they share:

    app.py          the group, its options, which module holds which command
    lazy.py         a click group that imports a command's module only when it is asked for
    common.py       the client, error handling, time display
    errors.py       an error turned into a message and an exit code, in one place
    output.py       stable JSON for machines, aligned tables for people
    style.py        colour, short UUIDs, table layout
    text.py         text safe to print on a terminal
    quantities.py   time and sizes as people type and read them
    table_fit.py    a table fitted to the terminal's width, columns dropped by priority
    topology_input.py  a topology argument: a file, an example or a recorded machine
    quick_exit.py   ending without the interpreter's teardown
    exit_codes.py   the exit codes, which errors.py gives out

Importing this package is cheap: click and the commands load when used, and the plain
forms of `run` (how jobs start) are read without click at all (`leasing/quick_run.py`).
"""

from __future__ import annotations

import signal
import sys
from typing import Any

__all__ = ["CliContext", "cli", "main"]


def main() -> None:
    from gpuallocd.cli.leasing.quick_run import plain_run
    from gpuallocd.cli.quick_exit import Finished, end_process

    # Ctrl-C and `kill -INT` stop a command however it was started: a shell starts a
    # background job (`cmd &`, `nohup`, a script) with SIGINT ignored, and Python keeps an
    # inherited "ignore", so a waiting `allocate` or a `status --watch` could not be stopped.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        plain = plain_run(sys.argv[1:])
        if plain is not None:
            plain.run()
        from gpuallocd.cli.app import main as click_main

        click_main()
    except Finished as finished:
        end_process(finished.status)


def __getattr__(name: str) -> Any:
    if name in ("cli", "CliContext"):
        from gpuallocd.cli import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
