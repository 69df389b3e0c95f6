"""`gpuallocctl`: the admin and user command line.

Each command's module is imported only when that command is used (`lazy.py`), so `run`
does not pay for the planning code nor `plan` for the client.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from gpuallocd import __version__
from gpuallocd.cli.lazy import LazyGroup

__all__ = ["COMMAND_MODULES", "CliContext", "cli", "main"]

# Every command by name, and the module that defines it (with a `COMMANDS` tuple).
_MODULES = {
    "gpuallocd.cli.looking.status": ("status",),
    "gpuallocd.cli.leasing.leases": ("leases", "allocate", "renew", "free", "revoke"),
    "gpuallocd.cli.looking.queue": ("queue", "history"),
    "gpuallocd.cli.leasing.run": ("run", "shell"),
    "gpuallocd.cli.leasing.preempt": ("preempt", "checkpoint-done"),
    "gpuallocd.cli.offline.meta": ("completion", "policies"),
    "gpuallocd.cli.administering.hardware": ("topology", "rescan"),
    "gpuallocd.cli.offline.plan": ("plan", "simulate", "policy-bench"),
    "gpuallocd.cli.administering.integrations": ("slurm-gres",),
    "gpuallocd.cli.looking.limits": ("limits", "usage"),
    "gpuallocd.cli.administering.admin": ("drain", "undrain", "admin-log", "release"),
    "gpuallocd.cli.administering.doctor": ("doctor",),
    "gpuallocd.cli.administering.ledger": ("ledger",),
    "gpuallocd.cli.administering.reserve": ("reserve", "reservations", "unreserve"),
    "gpuallocd.cli.leasing.adopt": ("adopt", "unleased"),
    "gpuallocd.cli.leasing.agents": ("mcp",),
    "gpuallocd.cli.notifying.notify": ("notify", "notify-agent"),
}
COMMAND_MODULES = {name: module for module, names in _MODULES.items() for name in names}
# `--help` lists the commands in these groups, as docs/cli.md has them (a command missing
# here is listed under "Other commands").
HELP_GROUPS = (
    ("Leasing", ("allocate", "run", "shell", "renew", "free", "adopt", "checkpoint-done")),
    (
        "Looking",
        ("status", "leases", "queue", "history", "reservations", "limits", "usage", "policies"),
    ),
    (
        "Administering",
        (
            "revoke",
            "preempt",
            "drain",
            "undrain",
            "release",
            "reserve",
            "unreserve",
            "unleased",
            "admin-log",
            "doctor",
            "ledger",
        ),
    ),
    ("Notifications", ("notify", "notify-agent")),
    ("Agents", ("mcp",)),
    ("Integrations", ("slurm-gres",)),
    ("Without a daemon, and hardware", ("plan", "simulate", "policy-bench", "topology", "rescan")),
    ("Shell completion", ("completion",)),
)


class CliContext:
    """The group's options, which every command reads from `ctx.obj` (and never changes).

    A plain class: a dataclass would cost `run`'s start the import of `dataclasses`."""

    __slots__ = ("json", "socket")

    def __init__(self, socket: str | None, json: bool) -> None:
        self.socket = socket
        self.json = json


def _set_socket(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.obj = CliContext(socket=value, json=ctx.obj.json)


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.obj = CliContext(socket=ctx.obj.socket, json=True)


# The group's --socket and --json, repeated on each command, so that both go before or after
# the command's name (`gpuallocctl free ID --socket S`, `gpuallocctl status --json`).
_ANYWHERE: dict[str, dict[str, Any]] = {
    "--socket": {"callback": _set_socket, "metavar": "PATH", "help": "The daemon's socket."},
    "--json": {"callback": _set_json, "is_flag": True, "help": "Machine-readable JSON."},
}


def _accept_global_options(command: click.Command) -> None:
    taken = {opt for param in command.params for opt in param.opts}
    for flag, settings in _ANYWHERE.items():
        if flag not in taken:
            option = click.Option([flag], expose_value=False, is_eager=True, **settings)
            command.params.append(option)


class CliGroup(LazyGroup):
    """The lazy group; each command, once loaded, takes --socket and --json after its name."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        _accept_global_options(cmd)
        super().add_command(cmd, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands in HELP_GROUPS' groups, each with its short help, not one long list."""
        listed = set(self.list_commands(ctx))
        placed: set[str] = set()
        for title, names in (*HELP_GROUPS, ("Other commands", tuple(sorted(listed)))):
            rows = []
            for name in names:
                command = self.get_command(ctx, name) if name in listed - placed else None
                if command is not None and not command.hidden:
                    placed.add(name)
                    rows.append((name, command.get_short_help_str(formatter.width - 25)))
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


@click.group(
    cls=CliGroup,
    lazy_commands=COMMAND_MODULES,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option(
    "--socket",
    envvar="GPUALLOCD_SOCKET",
    default=None,
    help="The daemon's socket (default: $GPUALLOCD_SOCKET, else /run/gpuallocd/gpuallocd.sock).",
)
@click.option("--json", "as_json", is_flag=True, help="Stable machine-readable JSON output.")
@click.version_option(__version__, "-V", "--version", prog_name="gpuallocctl")
@click.pass_context
def cli(ctx: click.Context, socket: str | None, as_json: bool) -> None:
    """Lease GPUs from gpuallocd, and inspect or revoke leases."""
    ctx.obj = CliContext(socket=socket, json=as_json)


def main() -> None:
    """`gpuallocctl` through click (`gpuallocd.cli.main` sets up SIGINT first)."""
    sys.exit(cli.main(prog_name="gpuallocctl", standalone_mode=True))
