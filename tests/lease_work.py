"""Work started under a real user's `gpu_lease`, and what the daemon says it covers.

The holder script (`PRELUDE` and a body) runs as a test user: it takes a lease of one GPU,
prints the lease's id, and leaves the rest to the body. Work marks itself with an empty file
named by its pid in a directory the test reads (`marked`), and sleeps; `covered` is what
the daemon says the lease covers, and `kill_and_time_the_end` how soon after the work is
killed the daemon recorded the end of the lease.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from gpulease import Client

from tests.harness import ProcessDaemon
from tests.system_users import SystemUsers

PRELUDE = """
import os, sys, time, warnings
warnings.simplefilter("ignore")  # fork() beside the renewer thread
from gpulease import gpu_lease
WORK = sys.argv[1]

def quiet():
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)

def mark():
    open(os.path.join(WORK, str(os.getpid())), "w").close()

def work():
    quiet()
    mark()
    time.sleep(600)
    os._exit(0)

lease = gpu_lease(1, socket=sys.argv[2], on_revoke=os.environ.get("ON_REVOKE", "warn"))
lease = lease.__enter__()
print(lease.id, flush=True)
"""


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def prepare_work_dir(root: Path) -> Path:
    directory = root / "work"
    directory.mkdir()
    directory.chmod(0o1777)
    return directory


def kill_marked(work_dir: Path) -> None:
    """Whatever of the marked work still runs."""
    for pid in marked(work_dir):
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def start_and_leave(users: SystemUsers, daemon: ProcessDaemon, work_dir: Path, body: str) -> str:
    """alice's holder takes a lease, runs `body` and exits at once: the lease's id."""
    script = PRELUDE + body + "os._exit(0)\n"
    holder = users.run("alice", ["-c", script, str(work_dir), str(daemon.paths.socket)])
    assert holder.returncode == 0, holder.stderr
    return holder.stdout.strip()


def marked(work_dir: Path) -> set[int]:
    return {int(entry.name) for entry in work_dir.iterdir() if entry.name.isdigit()}


def covered(client: Client, lease_id: str) -> set[int]:
    return set(client.lease(lease_id).raw["processes"])


def kill_and_time_the_end(client: Client, lease_id: str, pids: set[int]) -> float:
    """SIGKILL every pid; once the lease has ended (told by the daemon's event long poll),
    how long after the kill the daemon recorded its end."""
    killed_at = time.time()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    lease, seen = client.lease(lease_id), 0
    deadline = time.monotonic() + 60
    while lease.state == "active" and time.monotonic() < deadline:
        lease, events, _ = client.lease_events(lease_id, after=seen, wait=30)
        seen = max([seen, *(e["seq"] for e in events)])
    assert lease.state == "freed", lease.state
    assert lease.raw["ended_at"] is not None
    return float(lease.raw["ended_at"]) - killed_at
