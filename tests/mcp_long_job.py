"""An agent starts a long job and ends its session, printed as a transcript: it allocates,
takes export_env, starts the job in the background from its shell with the `run_prefix` it
was given, and the session ends; the lease stays while the job runs, renewed by `run`, and
ends when the job does.

    python -m tests.mcp_long_job            # on a fresh daemon (example 4-GPU topology)
    python -m tests.mcp_long_job SOCKET     # on a running daemon, as the user running it

The job is a `train.py` that runs until a file `done` appears beside it. docs/agents.md
shows the output; tests/test_following_work.py runs it and holds the lease to the job.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from gpulease import Client

from tests.harness import DaemonPaths, ThreadDaemon, ctl_argv, wait_for
from tests.mcp_session import mcp_session

TRAIN = """\
import os, time
while not os.path.exists("done"):
    time.sleep(0.2)
print("trained")
"""
ALLOCATE = {"count": 1, "label": "agent: train", "ttl_seconds": 600}


@dataclass
class LongJob:
    """What the session saw: its lines, the lease, whether the lease was active with the job
    among its processes after the session ended, when the job was told to end, and the
    lease once ended."""

    lines: list[str] = field(default_factory=list)
    lease_id: str = ""
    held_after_session: bool = False
    done_at: float = 0.0  # when the job was told to finish
    ended: dict[str, Any] = field(default_factory=dict)


def _ctl(socket: Path, *args: str) -> str:
    done = subprocess.run(ctl_argv(socket, *args), capture_output=True, text=True, timeout=60)
    return done.stdout.rstrip()


def _lease(socket: Path, lease_id: str) -> dict[str, Any]:
    with Client(socket) as client:
        found: dict[str, Any] = client.request("GET", f"/v1/leases/{lease_id}")
        return found


async def _session(socket: Path, work: Path, seen: LongJob) -> tuple[subprocess.Popen[bytes], int]:
    async with mcp_session(None, "", socket) as session:
        granted = await session.call_tool("allocate", ALLOCATE)
        seen.lease_id = granted.structured_content["id"]  # type: ignore[index]
        text = granted.content[0].text  # type: ignore[union-attr]
        seen.lines.append(f"> allocate {json.dumps(ALLOCATE)}\n{text}")
        sent = {"lease_id": seen.lease_id}
        env = await session.call_tool("export_env", sent)
        text = env.content[0].text  # type: ignore[union-attr]
        seen.lines.append(f"> export_env {json.dumps(sent)}\n{text}")
        run_prefix = env.structured_content["run_prefix"]  # type: ignore[index]
        argv = ["nohup", *shlex.split(run_prefix), "python3", "train.py"]
        seen.lines.append(f"$ {shlex.join(argv)} > train.log 2>&1 &    # the agent's shell")
        with open(work / "train.log", "wb") as log:
            job = subprocess.Popen(argv, cwd=work, stdout=log, stderr=log, start_new_session=True)
        server = _lease(socket, seen.lease_id)["pid"]
        wait_for(lambda: job.pid in _lease(socket, seen.lease_id)["processes"], 60, what="join")
    seen.lines.append("# the session ends: the client stops the server")
    return job, server


def long_job(socket: Path) -> LongJob:
    """Run the session on the daemon at `socket`, as this process's user."""
    seen = LongJob()
    with tempfile.TemporaryDirectory(prefix="train-") as directory:
        work = Path(directory)
        (work / "train.py").write_text(TRAIN)
        job, server = anyio.run(_session, socket, work, seen)
        wait_for(lambda: not Path(f"/proc/{server}").exists(), 30, what="the server's exit")
        wait_for(lambda: server not in _lease(socket, seen.lease_id)["processes"], 30, what="")
        lease = _lease(socket, seen.lease_id)
        seen.held_after_session = lease["state"] == "active" and job.pid in lease["processes"]
        seen.lines.append(f"$ gpuallocctl leases\n{_ctl(socket, 'leases')}")
        seen.done_at = time.time()
        (work / "done").touch()
        seen.lines.append("$ touch done    # train.py ends")
        job.wait(60)
        wait_for(lambda: _lease(socket, seen.lease_id)["state"] != "active", 30, what="end")
        seen.ended = _lease(socket, seen.lease_id)
        seen.lines.append(f"$ cat train.log\n{(work / 'train.log').read_text().rstrip()}")
        history = _ctl(socket, "history", "--lease", seen.lease_id)
        seen.lines.append(f"$ gpuallocctl history --lease {seen.lease_id}\n{history}")
    return seen


def main() -> None:
    if len(sys.argv) > 1:
        print("\n\n".join(long_job(Path(sys.argv[1])).lines))
        return
    with tempfile.TemporaryDirectory(prefix="ga-", dir="/tmp") as root:
        daemon = ThreadDaemon(DaemonPaths(Path(root)), default_policy="best-effort").start()
        try:
            print("\n\n".join(long_job(daemon.paths.socket).lines))
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
