"""A click group that imports a command's module only when that command is asked for.

`gpuallocctl run` should not pay for importing the planning code, and `plan` not for the
client: the group knows each command's name and module, and imports the module on demand.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

from gpuallocd.cli.errors import GuardedGroup

__all__ = ["LazyGroup", "all_commands"]


class LazyGroup(GuardedGroup):
    """A GuardedGroup whose commands are `name -> module`; each module has a `COMMANDS` tuple."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self.lazy_commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            self._load(self.lazy_commands[cmd_name])
        return self.commands.get(cmd_name)

    def _load(self, module_name: str) -> None:
        for command in importlib.import_module(module_name).COMMANDS:
            self.add_command(command)


def all_commands(group: click.Group) -> dict[str, click.Command]:
    """Every command of `group` by name, its modules imported (for docs and tests)."""
    ctx = click.Context(group)
    found = {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}
    return {name: command for name, command in found.items() if command is not None}
