"""The command line the server gives an agent for work that outlives its session.

`gpuallocctl run --lease ID -- COMMAND` runs COMMAND as one of the lease's processes: the
daemon counts it by the kernel's word (SO_PEERCRED), `run` renews the lease while it runs,
and the lease ends when both the session and the command have ended (`run_joined` in
cli/leasing/run.py).
The line names the `gpuallocctl` that serves this session (the console script it was started
as, else this Python with `-m gpuallocd.cli`) and the socket it talks to, so it works from
the agent's shell whatever that shell's PATH and environment.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

__all__ = ["run_prefix"]


def _gpuallocctl(argv0: str, python: str) -> list[str]:
    script = Path(argv0)
    if script.name == "gpuallocctl" and script.is_file():
        return [str(script.resolve())]
    return [python, "-m", "gpuallocd.cli"]


def run_prefix(lease_id: str, socket: str, argv0: str | None = None) -> str:
    """`gpuallocctl --socket SOCKET run --lease ID --`, quoted for a POSIX shell."""
    ctl = _gpuallocctl(sys.argv[0] if argv0 is None else argv0, sys.executable)
    return shlex.join([*ctl, "--socket", socket, "run", "--lease", lease_id, "--"])
