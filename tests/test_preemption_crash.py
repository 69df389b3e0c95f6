"""A daemon killed between a preemption's warning and its kill: the restarted daemon resumes
the preemption with the deadline it had (from the ledger), signals the job it had not yet
signalled, kills what is left at that deadline, and the waiting colleague is granted; nothing
is double-booked. `python -m gpuallocd` as a process of its own, killed at its crash point."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from tests.harness import ProcessDaemon, wait_for
from tests.ledger_damage import CRASH_ENV
from tests.preempt_node import JOB, gone, holder_pids, overlapping_leases
from tests.system_users import SystemUsers, open_to_everyone

TERMS = {
    "preempt_min_runtime_seconds": 0,
    "preempt_lead_seconds": 1,
    "preempt_grace_seconds": 15,
}


def _recorded(ledger: Path, lease_id: str) -> tuple[float, str]:
    with closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as conn, conn:
        deadline, state = conn.execute(
            "SELECT deadline_at, state FROM preemptions WHERE lease_id = ?", (lease_id,)
        ).fetchone()
    return float(deadline), str(state)


def test_a_crash_between_the_warning_and_the_kill_resumes_with_the_same_deadline(
    process_daemon: Callable[..., ProcessDaemon],
    system_users: SystemUsers,
    short_dir: Path,
) -> None:
    """Killed right after the warning's commit: the restart keeps the deadline, signals, then
    kills at it; bob's waiting request (sent again by his client) is granted after."""
    users = system_users
    open_to_everyone(short_dir)
    work = short_dir / "work"
    work.mkdir()
    work.chmod(0o1777)
    os.environ.update({**CRASH_ENV, "GPUALLOCD_TEST_CRASH_AT": "after-preempt-warning"})
    daemon = process_daemon(**TERMS)
    socket = str(daemon.paths.socket)
    log = work / "alice.events"
    log.touch()
    log.chmod(0o666)
    holder_process = users.start(
        "alice", [JOB, "hold", "ignore", str(log), socket, "4"], work / "a"
    )
    bob = None
    try:
        wait_for(lambda: "worker" in log.read_text(), 30, what="alice's lease and its worker")
        lease_id, holder, worker = holder_pids(log)
        argv = ["-m", "gpuallocd.cli", "--socket", socket, "--json", "allocate", "-n", "1"]
        bob = users.start("bob", [*argv, "--wait", "--label", "bob"], work / "bob.log")
        assert daemon.process is not None
        assert daemon.process.wait(30) == -9, "the daemon did not die at its crash point"
        ledger = daemon.paths.state_dir / "ledger.sqlite3"
        deadline, state = _recorded(ledger, lease_id)
        assert state == "warned"
        for key in (*CRASH_ENV, "GPUALLOCD_TEST_CRASH_AT"):
            os.environ.pop(key, None)
        restarted = process_daemon(**TERMS)
        wait_for(lambda: "resumed" in restarted.stderr(), 30, what="the resume logged")
        assert f"preemption of lease {lease_id} resumed" in restarted.stderr()
        with restarted.client() as client:
            shown = client.request("GET", f"/v1/leases/{lease_id}")["preemption"]
        assert shown["deadline_at"] == deadline
        wait_for(lambda: log.read_text().count("signal ") == 2, 30, what="the signal after it")
        wait_for(lambda: gone(holder) and gone(worker), 60, what="the kill at the deadline")
        assert bob.wait(60) == 0, (work / "bob.log").read_text()
        with restarted.client() as client:
            ended = client.request("GET", f"/v1/leases/{lease_id}")
        assert ended["state"] == "preempted" and ended["preemption"]["state"] == "killed"
        assert deadline <= ended["ended_at"] < deadline + 10
        assert overlapping_leases(ledger) == []
    finally:
        for process in (holder_process, bob):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
