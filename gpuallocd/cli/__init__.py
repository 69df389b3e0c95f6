"""The `gpuallocctl` command line."""

from __future__ import annotations

from gpuallocd.cli.app import CliContext, cli, main

__all__ = ["CliContext", "cli", "main"]
