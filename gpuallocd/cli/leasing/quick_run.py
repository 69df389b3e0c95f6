"""`gpuallocctl run` read without click, for the plain forms that jobs start with.

`gpuallocctl run -n 2 -- python train.py` starts every job, and importing click and
building its commands was a third of that start. This reads the forms whose meaning is
plain into exactly what click would make of them: --socket and --json (before or after
`run`), then -n/--count, --gpu, --label, --policy, --visible and --nested, and the command
after them or after `--`. Anything else (help, --version, --wait, a duration, a size, MIG,
an unknown or repeated-flag spelling, a value that starts with `-`, shell completion) is not
read here: `plain_run` answers None and click reads the command line as it always has, with
its own messages for what is wrong. `tests/test_cli_start.py` compares the two readings over
generated command lines.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["PlainRun", "plain_run"]

# Options that take a value, by every spelling, and the request field each one sets.
_VALUED = {
    "-n": "count",
    "--count": "count",
    "--gpu": "gpus",
    "--label": "label",
    "--policy": "policy",
    "--visible": "visible",
    "--nested": "nested",
    "--socket": "socket",
}
_CHOICES = {"visible": ("uuid", "index"), "nested": ("reuse", "new")}
# `run`'s options that only click reads, as click gives them when none is on the line (a
# preemptible `run` or `run --lease` is read by click); `gpu_lease`'s defaults say the same.
_NOT_PREEMPTIBLE = {
    "lease_id": None,
    "preemptible": False,
    "min_runtime": None,
    "lead": None,
    "grace": None,
    "preempt_signal": None,
    "requeue": False,
}
_GLOBAL = ("--socket", "--json")  # what the group itself takes before `run`
_COMPLETION = "_GPUALLOCCTL_COMPLETE"  # click's shell completion asks through this variable


class PlainRun:
    """A `run` command line read without click: the group's options, the request as the
    `run` command receives its options, and the command to run."""

    __slots__ = ("command", "json", "options", "socket")

    def __init__(self) -> None:
        self.socket: str | None = None
        self.json = False
        self.command: list[str] = []
        self.options: dict[str, Any] = {
            "count": None,
            "gpus": (),
            "memory": None,
            "mig": None,
            "policy": None,
            "ttl": None,
            "label": None,
            "min_free_memory": None,
            "power_limit": None,
            "wait": False,
            "timeout": None,
            "visible": "uuid",
            "nested": "reuse",
            **_NOT_PREEMPTIBLE,
        }

    def take(self, name: str, value: str) -> bool:
        """Take one option's value; False where click would read it otherwise or refuse it."""
        if value.startswith("-"):
            return False
        if name == "socket":
            self.socket = value
        elif name == "gpus":
            self.options["gpus"] += (value,)
        elif name == "count":
            if not (value.isascii() and value.isdigit() and int(value) >= 1):
                return False
            self.options["count"] = int(value)
        elif name in _CHOICES and value not in _CHOICES[name]:
            return False
        else:
            self.options[name] = value
        return True

    def run(self) -> NoReturn:
        """Run it as `run` does; raises Finished with the exit status, or exits as click
        would for an error (`errors.exit_as_a_command`)."""
        from gpuallocd.cli.leasing import runner
        from gpuallocd.cli.quick_exit import Finished

        label = self.options.pop("label")
        options = {k: v for k, v in self.options.items() if k not in _NOT_PREEMPTIBLE}
        try:
            request = runner.lease_request(self.command, label, options)
            status = runner.run_leased(self.socket, self.json, self.command, request)
        except (Exception, KeyboardInterrupt) as exc:
            from gpuallocd.cli.errors import exit_as_a_command

            exit_as_a_command(exc)
        raise Finished(status)


def plain_run(argv: Sequence[str]) -> PlainRun | None:
    """`argv` (without the program's name) read as a plain `run`; None for anything else."""
    if _COMPLETION in os.environ:
        return None
    found = PlainRun()
    args = list(argv)
    if not _read_options(found, args, _GLOBAL) or not args or args.pop(0) != "run":
        return None
    if not _read_options(found, args, (*_VALUED, "--json")):
        return None
    if args and args[0] == "--":
        args.pop(0)
    if not args:
        return None  # click says what is missing
    found.command = args
    return found


def _read_options(found: PlainRun, args: list[str], known: tuple[str, ...]) -> bool:
    """Consume the options at the front of `args`, up to the first argument that is none
    (or `--`, left in place); False at one that is not a plain spelling of `known`."""
    while args and args[0].startswith("-") and args[0] != "--":
        arg = args.pop(0)
        name, equals, attached = arg.partition("=")
        if arg == "--json" and arg in known:
            found.json = True
        elif name in known and name in _VALUED and equals and name.startswith("--"):
            if not found.take(_VALUED[name], attached):
                return False
        elif arg in known and arg in _VALUED and args:
            if not found.take(_VALUED[arg], args.pop(0)):
                return False
        elif arg.startswith("-n") and len(arg) > 2 and "-n" in known and not equals:
            if not found.take("count", arg[2:]):
                return False
        else:
            return False
    return True
