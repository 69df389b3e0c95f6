"""`gpuallocctl`: the admin and user command line."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, replace
from typing import Any

import click

from gpuallocd import __version__
from gpuallocd.cli.errors import GuardedGroup

__all__ = ["CliContext", "cli", "main"]

# Each module defines click commands and a `COMMANDS` tuple of them.
COMMAND_MODULES = (
    "gpuallocd.cli.status",
    "gpuallocd.cli.leases",
    "gpuallocd.cli.queue",
    "gpuallocd.cli.run",
    "gpuallocd.cli.meta",
    "gpuallocd.cli.bench",
    "gpuallocd.cli.hardware",
    "gpuallocd.cli.plan",
    "gpuallocd.cli.integrations",
    "gpuallocd.cli.limits",
    "gpuallocd.cli.admin",
)


@dataclass(frozen=True)
class CliContext:
    socket: str | None
    json: bool


@click.group(cls=GuardedGroup, context_settings={"help_option_names": ["-h", "--help"]})
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


def _set_socket(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.obj = replace(ctx.obj, socket=value)


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.obj = replace(ctx.obj, json=True)


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


def _register() -> None:
    for module_name in COMMAND_MODULES:
        module = importlib.import_module(module_name)
        for command in module.COMMANDS:
            _accept_global_options(command)
            cli.add_command(command)


_register()


def main() -> None:
    sys.exit(cli.main(prog_name="gpuallocctl", standalone_mode=True))
