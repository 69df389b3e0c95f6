"""Start `gpuallocd` the way systemd would, for tests/test_systemd.py.

    python -m tests.systemd_launch [--listen-fd N] [--deny-write-execute] -- GPUALLOCD-ARGS

`--listen-fd N` moves the inherited socket N to fd 3 and sets LISTEN_FDS=1 and LISTEN_PID to
this process, as systemd does between fork and exec. `--deny-write-execute` turns on the
kernel's memory-deny-write-execute (prctl PR_SET_MDWE, Linux 6.3+), what
`MemoryDenyWriteExecute=yes` asks for. The daemon then runs in this same process.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import sys

PR_SET_MDWE = 65
PR_MDWE_REFUSE_EXEC_GAIN = 1


def _deny_write_execute() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        sys.exit(f"prctl(PR_SET_MDWE) failed: {os.strerror(ctypes.get_errno())}")


def main(argv: list[str]) -> None:
    separator = argv.index("--")
    options, daemon_args = argv[:separator], argv[separator + 1 :]
    if "--listen-fd" in options:
        fd = int(options[options.index("--listen-fd") + 1])
        if fd != 3:
            os.dup2(fd, 3)
            os.close(fd)
        os.environ["LISTEN_FDS"] = "1"
        os.environ["LISTEN_PID"] = str(os.getpid())
    if "--deny-write-execute" in options:
        _deny_write_execute()
    sys.argv = ["gpuallocd", *daemon_args]
    runpy.run_module("gpuallocd", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
