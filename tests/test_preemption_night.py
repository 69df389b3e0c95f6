"""Done when: alice starts a preemptible run on every idle GPU at night; bob's request in the
morning is served within the grace period; the preempted job saved, was requeued and resumed
from its checkpoint; nothing in the ledger is lost or double-booked. Real users, a real
daemon, `gpuallocctl run --requeue` with the stand-in of the PyTorch example
(tests/preempt_job.py `train`), and the daemon's clock stepped through the night."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.harness import wait_for
from tests.preempt_node import HOUR, JOB, TERMS, Node, gone, overlapping_leases
from tests.system_users import SystemUsers

STEPS = 300  # of 0.05 s each: a job a quarter of a minute long in real time


@pytest.fixture
def node(short_dir: Path, system_users: SystemUsers) -> Iterator[Node]:
    node = Node(short_dir, system_users)
    yield node
    node.close()


def _leases(node: Node) -> list[dict[str, object]]:
    with node.client() as client:
        found: list[dict[str, object]] = client.request("GET", "/v1/leases")["leases"]
        return found


def test_a_night_of_preemptible_runs_gives_way_in_the_morning_and_loses_no_work(
    node: Node,
) -> None:
    """The night's four jobs hold every GPU; bob's morning request preempts the one that
    loses least, whose job saves and acknowledges at the warning (long before the deadline),
    is requeued at its place, resumes from that checkpoint once bob is done, and finishes;
    every lease in the ledger ended once, none overlapped another on a GPU."""
    checkpoints = node.work / "ckpt"
    checkpoints.mkdir()
    checkpoints.chmod(0o1777)
    for n in range(4):
        job = [JOB, "train", f"night{n}", str(STEPS), str(checkpoints), node.socket]
        node.start_ctl(
            "alice",
            f"night{n}",
            "run",
            "--requeue",
            "-n",
            "1",
            "--ttl",
            "12h",
            "--",
            "python3",
            *job,
        )
    wait_for(lambda: len(_leases(node)) == 4, 60, what="four runs on the four GPUs")
    night = {str(lease["id"]): int(str(lease["pid"])) for lease in _leases(node)}
    node.step(8 * HOUR)
    morning = [
        "python3",
        "-c",
        "import os; print('bob ran on', os.environ['CUDA_VISIBLE_DEVICES'])",
    ]
    bob = node.start_ctl("bob", "bob", "run", "-n", "1", "--wait", "--label", "bob", "--", *morning)
    assert bob.wait(120) == 0, node.log("bob")
    assert "bob ran on GPU-" in node.log("bob")

    (preempted,) = [i for i in night if "preempt_warning" in node.events(i)]
    record = node.lease(preempted)
    assert record["state"] == "preempted"
    preemption = record["preemption"]
    assert preemption["state"] == "acknowledged" and not preemption["late"]
    assert preemption["ended_at"] - preemption["decided_at"] <= TERMS["preempt_grace_seconds"]
    path = record["last_checkpoint"]["path"]
    wait_for(lambda: gone(night[preempted]), 30, what="the preempted attempt gone")

    name = re.search(r"(night\d)-step-(\d+)\.json$", path)
    assert name is not None, path
    job, saved_step = name.group(1), int(name.group(2))
    wait_for(lambda: "done at" in node.log(job), 120, what=f"{job} finished after its requeue")
    log = node.log(job)
    assert f"{job}: saved {path} and acknowledged" in log
    assert f"{job}: resumed from {path} at step {saved_step}" in log
    assert f"lease {preempted} was preempted" in log and "requeued at its place" in log
    for n in range(4):
        wait_for(lambda n=n: "done at step" in node.log(f"night{n}"), 120, what=f"night{n} done")
    wait_for(lambda: not _leases(node), 60, what="every lease given back")

    ledger = node.paths.state_dir / "ledger.sqlite3"
    assert overlapping_leases(ledger) == []
    with closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as conn, conn:
        ends = conn.execute(
            "SELECT lease_id, count(*) FROM history WHERE event IN "
            "('freed', 'expired', 'revoked', 'preempted') GROUP BY lease_id"
        ).fetchall()
        leases = conn.execute("SELECT id, state FROM leases").fetchall()
        requeued = conn.execute(
            "SELECT lease_id FROM preemptible_leases WHERE requeue_of = ?", (preempted,)
        ).fetchall()
    assert {lease_id for lease_id, _ in leases} == {lease_id for lease_id, _ in ends}
    assert all(count == 1 for _, count in ends)  # each lease ended once
    assert len(leases) == 6  # four at night, bob's, the requeue
    assert len(requeued) == 1
