"""Run a `gpuallocctl run` read by `quickrun`, with the click command line's error output."""

from __future__ import annotations

import sys

from gpuallocd.cli.quickrun import QuickRun
from gpuallocd.cli.runner import lease_and_run

__all__ = ["quick_main"]

EXIT_ABORTED = 1  # as click's standalone mode on Ctrl-C


def quick_main(quick: QuickRun) -> int:
    """The exit code: the command's, or the CLI's for an error (shown as click shows it)."""
    try:
        return lease_and_run(quick.request, quick.socket, announce=not quick.json)
    except KeyboardInterrupt:
        print("Aborted!", file=sys.stderr)
        return EXIT_ABORTED
    except Exception as exc:
        from gpuallocd.cli.errors import as_cli_error

        mapped = as_cli_error(exc)
        if mapped is None:
            raise
        mapped.show()
        return mapped.exit_code
