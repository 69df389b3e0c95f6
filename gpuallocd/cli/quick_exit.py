"""Ending `gpuallocctl` without the interpreter's teardown, once a command holds nothing.

At a normal exit the interpreter frees every module and object it loaded; for `run` that is
about 200 modules and several milliseconds, each time a job starts. A command that has let go
of everything it held (its lease, its connections, its threads, its children) raises
`Finished`, and the console entry point then flushes stdout and stderr and ends the process
at once (`os._exit`), as mypy does. Where the command runs inside another program (click's
test runner, an import of `cli`), `Finished` is an ordinary SystemExit.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn

__all__ = ["Finished", "end_process"]


class Finished(SystemExit):
    """A command's exit status, raised once it holds nothing that a normal exit would release:
    no lease, no open connection, no thread still running, no child left to wait for."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def end_process(status: int) -> NoReturn:
    """Flush stdout and stderr, then end the process with `status` at once (no teardown).

    A stream that cannot be flushed (a reader that hung up) is left as it is: the exit code
    stays the command's, where a normal exit would report 120.
    """
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    os._exit(status)
