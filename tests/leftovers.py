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


def _parent(pid: int) -> int:
    for line in _read(Path(f"/proc/{pid}/status")).decode(errors="replace").splitlines():
        if line.startswith("PPid:"):
            return int(line.split()[1])
    return 0


def _is_zombie(pid: int) -> bool:
    stat = _read(Path(f"/proc/{pid}/stat")).decode(errors="replace")
    return not stat or stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] in ("Z", "X")


def _descends_from(pid: int, ancestor: int) -> bool:
    seen = 0
    while pid > 1 and seen < 64:
        pid = _parent(pid)
        if pid == ancestor:
            return True
        seen += 1
    return False


def started_by_this_run(me: int) -> dict[int, str]:
    """pid -> command line of every live process of this run but pytest itself."""
    marker = f"{MARKER}={me}".encode()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        pid = int(entry.name)
        environ = _read(entry / "environ").split(b"\0")
        if (marker in environ or _descends_from(pid, me)) and not _is_zombie(pid):
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
