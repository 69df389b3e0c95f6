"""Who preempts whom on a real daemon, as real users: a storm of requests against minimum
runtimes, a requeue that keeps its place and never preempts, an admin, an advance
reservation about to start, and how far preemptible leases may go past `max_gpus`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import wait_for
from tests.preempt_node import HOUR, MINUTE, START, Node, overlapping_leases
from tests.system_users import SystemUsers


@pytest.fixture
def node(short_dir: Path, system_users: SystemUsers) -> Iterator[Node]:
    node = Node(short_dir, system_users)
    yield node
    node.close()


def _preemptible(node: Node, short: str, *args: str) -> str:
    """A detached preemptible lease of `short` (no process: it ends at its deadline)."""
    done = node.ctl(short, "--json", "allocate", "--preemptible", "--ttl", "2d", *args)
    assert done.returncode == 0, done.stderr
    lease_id: str = json.loads(done.stdout)["id"]
    return lease_id


def _waits(node: Node, short: str, label: str, *args: str) -> None:
    node.start_ctl(short, label, "allocate", "--wait", "--label", label, *args)
    wait_for(lambda: label in _queue_labels(node), 30, what=f"{label} queued")


def _queue_labels(node: Node) -> list[str]:
    with node.client() as client:
        return [w["label"] for w in client.queue()]


def _preempted(node: Node, leases: list[str]) -> list[str]:
    return [i for i in leases if "preempt_warning" in node.events(i)]


def _granted(node: Node, label: str) -> bool:
    with node.client() as client:
        return any(lease.label == label for lease in client.leases())


def test_a_storm_of_requests_preempts_no_lease_before_its_minimum_nor_more_than_needed(
    node: Node,
) -> None:
    """Four of alice's preemptible leases, ten minutes old; three colleagues queue one GPU
    each: nothing is preempted, the queue says when it will be; at the minimum runtime exactly
    three leases are warned, one per request, and nothing more once they are served."""
    leases = [_preemptible(node, "alice", "-n", "1") for _ in range(4)]
    node.step(10 * MINUTE)
    for short in ("bob", "carol", "dave"):
        _waits(node, short, f"storm-{short}", "-n", "1")
    time.sleep(1.2)  # two ticks of the timer: none may preempt before the minimum
    assert _preempted(node, leases) == []
    shown = node.ctl("bob", "queue")
    at = time.strftime("%H:%M", time.localtime(START + 30 * MINUTE))
    assert shown.stdout.count("will preempt") == 3, shown.stdout
    assert shown.stdout.count(f" at {at}") == 3, shown.stdout
    node.step(20 * MINUTE)
    wait_for(lambda: len(_preempted(node, leases)) == 3, 30, what="three preemptions")
    node.step(6 * MINUTE)
    for short in ("bob", "carol", "dave"):
        wait_for(lambda s=short: _granted(node, f"storm-{s}"), 30, what=f"{short}'s grant")
    node.step(HOUR)
    time.sleep(1.2)  # nothing is left to preempt for: the fourth lease runs on
    (spared,) = [i for i in leases if i not in _preempted(node, leases)]
    assert node.lease(spared)["state"] == "active"
    assert overlapping_leases(node.paths.state_dir / "ledger.sqlite3") == []


REQUEUE = (
    "import json, sys\n"
    "from gpulease import Client\n"
    "c = Client(sys.argv[1])\n"
    "try:\n"
    "    lease = c.allocate(1, requeue_of=sys.argv[2], wait=True, label=sys.argv[3], ttl=86400)\n"
    "    print(json.dumps({'id': lease.id}))\n"
    "except Exception as exc:\n"
    "    print(json.dumps({'code': exc.code, 'message': exc.message}))\n"
)


def test_a_requeue_keeps_its_place_and_never_preempts_back(node: Node) -> None:
    """alice's lease, preempted for bob (it loses least: she checkpointed a minute ago), is
    requeued: it waits ahead of carol's later preemptible request (its place is its first
    request's) and preempts nothing, not even carol's preemptible lease past its minimum; bob
    may not requeue it, and alice may not requeue it twice."""
    firm = node.ctl("dave", "--json", "allocate", "-n", "2", "--ttl", "2d")
    assert firm.returncode == 0, firm.stderr
    alices = _preemptible(node, "alice", "-n", "1")
    carols = _preemptible(node, "carol", "-n", "1")
    node.step(HOUR)
    saved = node.ctl("alice", "checkpoint-done", "/scratch/a.pt", "--lease", alices)
    assert "progress recorded" in saved.stdout, saved.stderr
    node.step(MINUTE)
    _waits(node, "bob", "bob", "-n", "1", "--ttl", "1d")
    wait_for(lambda: _preempted(node, [alices, carols]) != [], 30, what="a preemption")
    (victim,) = _preempted(node, [alices, carols])
    assert victim == alices  # least work lost: a minute since her checkpoint, an hour of carol's
    node.step(6 * MINUTE)
    wait_for(lambda: _granted(node, "bob"), 30, what="bob's grant")
    _waits(node, "carol", "carol-later", "--preemptible", "-n", "1")
    node.start_python("alice", "requeue", "-c", REQUEUE, node.socket, alices, "alice-again")
    wait_for(lambda: "alice-again" in _queue_labels(node), 30, what="alice's requeue queued")
    assert _queue_labels(node) == ["alice-again", "carol-later"]
    node.step(2 * HOUR)
    time.sleep(1.2)
    assert "preempt_warning" not in node.events(carols)  # a requeue never preempts
    bob_try = node.users.run("bob", ["-c", REQUEUE, node.socket, alices, "bob-steal"])
    assert json.loads(bob_try.stdout)["code"] == "permission_denied"
    with node.client() as client:
        (bob,) = [lease for lease in client.leases() if lease.label == "bob"]
        client.free(bob.id)
    wait_for(lambda: _granted(node, "alice-again"), 30, what="alice's requeue served first")
    assert _queue_labels(node) == ["carol-later"]
    twice = node.users.run("alice", ["-c", REQUEUE, node.socket, alices, "alice-twice"])
    assert json.loads(twice.stdout)["code"] == "invalid_request"
    assert "requeued already" in json.loads(twice.stdout)["message"]


def test_an_admin_preempts_a_preemptible_lease_past_its_minimum_only(node: Node) -> None:
    """`preempt` before the minimum runtime says from when (exit 2); after it, the contract
    starts and the admin log names who; a user may not; a lease granted non-preemptible is
    not_preemptible."""
    lease_id = _preemptible(node, "alice", "-n", "1")
    for short in ("dave", "alice"):  # no admin groups here: root alone is an admin
        refused = node.ctl(short, "preempt", lease_id, "--reason", "mine now")
        assert refused.returncode == 5 and "permission_denied" in refused.stderr
    with node.client() as client:
        firm = client.allocate(1, ttl=3600)
    node.step(10 * MINUTE)
    done = _root_ctl(node, "preempt", lease_id, "--reason", "maintenance")
    assert done.returncode == 2 and "within_minimum_runtime" in done.stderr
    assert "may be preempted from" in done.stderr
    node.step(21 * MINUTE)
    done = _root_ctl(node, "preempt", lease_id, "--reason", "maintenance")
    assert done.returncode == 0, done.stderr
    assert "for root (admin): it ran 31m, past its minimum of 30m" in done.stdout
    assert "preempt_warning" in node.events(lease_id)
    refused = _root_ctl(node, "preempt", firm.id)
    assert refused.returncode == 2 and "not_preemptible" in refused.stderr
    log = _root_ctl(node, "admin-log")
    assert "preempt" in log.stdout and "maintenance" in log.stdout


def _root_ctl(node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "gpuallocd.cli", "--socket", node.socket, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_an_advance_reservation_preempts_in_time_for_its_start(node: Node) -> None:
    """A preemptible lease on a GPU reserved for bob from two hours on: preempted as late as
    its notice allows (6 minutes before the start), its deadline the start itself."""
    lease_id = _preemptible(node, "alice", "--gpu", "0")
    node.step(HOUR)
    made = _root_ctl(
        node, "--json", "reserve", "--gpu", "0", "--start", "+2h", "--duration", "1h",
        "--user", node.users.name("bob"), "--reason", "demo",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    start = json.loads(made.stdout)["start_at"]
    node.step(2 * HOUR - 6 * MINUTE - 5)
    time.sleep(1.2)
    assert "preempt_warning" not in node.events(lease_id)
    node.step(10)
    node.until_event(lease_id, "preempt_warning")
    preemption = node.lease(lease_id)["preemption"]
    assert preemption["trigger"] == "reservation"
    assert abs(preemption["deadline_at"] - start) <= 10
    node.step(6 * MINUTE)
    node.until_event(lease_id, "preempted")


LIMITED = """
[limits]
max_gpus = 1
[limits.user.{alice}]
max_preemptible_gpus = 2
"""


def test_preemptible_leases_go_past_max_gpus_only_as_far_as_the_site_allows(
    short_dir: Path, system_users: SystemUsers
) -> None:
    """alice may hold 1 GPU firmly and 2 more preemptible, no more (exit 6, naming
    max_preemptible_gpus); carol, with no such limit, 1 in all, preemptible or not."""
    config = LIMITED.format(alice=system_users.name("alice"))
    node = Node(short_dir, system_users, config=config)
    try:
        assert node.ctl("alice", "allocate", "-n", "1").returncode == 0
        assert node.ctl("alice", "allocate", "-n", "2", "--preemptible").returncode == 0
        flood = node.ctl("alice", "allocate", "-n", "1", "--preemptible")
        assert flood.returncode == 6 and "max_preemptible_gpus" in flood.stderr
        assert node.ctl("alice", "allocate", "-n", "1").returncode == 6
        carol = node.ctl("carol", "allocate", "-n", "1", "--preemptible")
        assert carol.returncode == 0, carol.stderr
        more = node.ctl("carol", "allocate", "-n", "1", "--preemptible")
        assert more.returncode == 6 and "max_gpus" in more.stderr
        shown = node.ctl("alice", "limits")
        assert "max_preemptible_gpus" in shown.stdout
    finally:
        node.close()
