"""The `gpuallocctl` command line.

Importing this package is cheap: click and the commands load when used. `main` reads a plain
`gpuallocctl run ...` itself (`quickrun`) and hands everything else to the click group.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["CliContext", "cli", "main"]


def main() -> None:
    from gpuallocd.cli.quickrun import parse_quick_run

    quick = parse_quick_run(sys.argv[1:])
    if quick is not None:
        from gpuallocd.cli.quickmain import quick_main

        sys.exit(quick_main(quick))
    from gpuallocd.cli.app import main as click_main

    click_main()


def __getattr__(name: str) -> Any:
    if name in ("cli", "CliContext"):
        from gpuallocd.cli import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
