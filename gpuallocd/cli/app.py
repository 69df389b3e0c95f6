"""`gpuallocctl`: the admin and user command line."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

import click

from gpuallocd.cli.errors import GuardedGroup

__all__ = ["CliContext", "cli", "main"]

# Each module defines click commands and a `COMMANDS` tuple of them.
COMMAND_MODULES = (
    "gpuallocd.cli.leases",
    "gpuallocd.cli.run",
    "gpuallocd.cli.bench",
    "gpuallocd.cli.hardware",
    "gpuallocd.cli.plan",
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
@click.pass_context
def cli(ctx: click.Context, socket: str | None, as_json: bool) -> None:
    """Lease GPUs from gpuallocd, and inspect or revoke leases."""
    ctx.obj = CliContext(socket=socket, json=as_json)


def _register() -> None:
    for module_name in COMMAND_MODULES:
        module = importlib.import_module(module_name)
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main() -> None:
    sys.exit(cli.main(prog_name="gpuallocctl", standalone_mode=True))
