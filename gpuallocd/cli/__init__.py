"""The `gpuallocctl` command line.

Importing this package is cheap: click and the commands load when used.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CliContext", "cli", "main"]


def main() -> None:
    from gpuallocd.cli.app import main as click_main
    from gpuallocd.cli.quick_exit import Finished, end_process

    try:
        click_main()
    except Finished as finished:
        end_process(finished.status)


def __getattr__(name: str) -> Any:
    if name in ("cli", "CliContext"):
        from gpuallocd.cli import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
