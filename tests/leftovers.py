"""The test run leaves no process behind: a check at the end of the session that fails naming
every process the run started that still runs.

A process belongs to the run when it descends from this pytest process (found through the
parent links in /proc), or when its environment carries the marker set here at the start of
the session (GPUALLOCD_TEST_RUN=<this pytest's pid>), which an orphan keeps after its parent
is gone. The marker is per pytest process, so each xdist worker checks its own children and
never its siblings. A process started with a fresh environment and orphaned is not seen (the
gap is said here rather than guessed at through process groups, which `make` and CI share).
Leftovers get a grace period to finish exiting (a fixture may have just signalled them), are
named in the failure, then killed so that they do not outlive the run.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest

MARKER = "GPUALLOCD_TEST_RUN"
GRACE_SECONDS = 10.0


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # gone, a zombie, or another user's (not root)
        return b""


def _parent_and_state(pid: int) -> tuple[int, str]:
    """The parent's pid and the one-letter state, from /proc/PID/stat (after the name, which
    may hold spaces and parentheses); (0, "X") when the process is gone."""
    stat = _read(Path(f"/proc/{pid}/stat")).decode(errors="replace")
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 2:
        return 0, "X"
    return int(fields[1]), fields[0]


def _descends_from(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    seen = 0
    while pid > 1 and seen < 64:
        pid = parents.get(pid, 0)
        if pid == ancestor:
            return True
        seen += 1
    return False


def started_by_this_run(me: int) -> dict[int, str]:
    """pid -> command line of every live process of this run but pytest itself.

    Each process's stat is read once (a machine may run thousands of processes; walking
    every one's ancestry through /proc again for each would take seconds)."""
    marker = f"{MARKER}={me}".encode()
    parents: dict[int, int] = {}
    live: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        parents[pid], state = _parent_and_state(pid)
        if pid != me and state not in ("Z", "X"):
            live.append(pid)
    found: dict[int, str] = {}
    for pid in live:
        entry = Path(f"/proc/{pid}")
        if _descends_from(pid, me, parents) or marker in _read(entry / "environ").split(b"\0"):
            argv = _read(entry / "cmdline").replace(b"\0", b" ").decode(errors="replace")
            found[pid] = argv.strip() or f"[{pid}]"
    return found


def still_running_after_grace(me: int, grace: float = GRACE_SECONDS) -> dict[int, str]:
    """The run's processes that are still there after `grace` seconds."""
    deadline = time.monotonic() + grace
    left = started_by_this_run(me)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = started_by_this_run(me)
    return left


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """Marks the run's children at the start; at the end fails naming any that still run."""
    me = os.getpid()
    os.environ[MARKER] = str(me)
    yield
    left = still_running_after_grace(me)
    for pid in left:
        with suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if left:
        names = "\n".join(f"  pid {pid}: {argv}" for pid, argv in sorted(left.items()))
        pytest.fail(f"the test run left {len(left)} process(es) running:\n{names}", False)
