"""The contract of a preemption, as real users and real processes live it against a real
daemon on hand clocks: the warning, then the signal after the lead, then the kill at the
deadline; an acknowledgement before it ends the lease at once, one after it is late; only the
owner acknowledges; a revoke with a grace warns its owner."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpulease import PermissionDenied

from tests.harness import wait_for
from tests.preempt_node import HOUR, MINUTE, Node, gone, holder_pids, overlapping_leases
from tests.system_users import SystemUsers


@pytest.fixture
def node(short_dir: Path, system_users: SystemUsers) -> Iterator[Node]:
    node = Node(short_dir, system_users)
    yield node
    node.close()


def _bob_waits(node: Node, count: int = 1, name: str = "bob") -> None:
    node.start_ctl("bob", name, "allocate", "-n", str(count), "--wait", "--label", name)
    wait_for(
        lambda: _queued(node, name) or _bob_lease(node, name) is not None,
        30,
        what=f"{name} queued (or granted)",
    )


def _queued(node: Node, label: str) -> bool:
    with node.client() as client:
        return any(w["label"] == label for w in client.queue())


def _bob_lease(node: Node, label: str = "bob") -> str | None:
    with node.client() as client:
        found = [lease.id for lease in client.leases() if lease.label == label]
    return found[0] if found else None


def test_the_warning_comes_first_the_signal_after_the_lead_then_the_kill_at_the_deadline(
    node: Node,
) -> None:
    """A job that never acknowledges: warned when bob's request needs its GPUs (past its
    minimum runtime), SIGUSR1 (its choice) to every process of it a minute later, once each
    (the holder from its own stream), and SIGKILL with the lease's end five minutes after
    that, then bob's grant: never before, and nothing double-booked."""
    log = node.start_holder("alice", "ignore", "alice", count=4)
    lease_id, holder, worker = holder_pids(log)
    node.step(31 * MINUTE)
    _bob_waits(node)
    node.until_event(lease_id, "preempt_warning")
    wait_for(lambda: "warned" in log.read_text(), 30, what="alice's job told")
    assert "signal" not in log.read_text()
    assert node.lease(lease_id)["preemption"]["state"] == "warned"
    node.step(MINUTE - 1)
    time.sleep(1.2)  # two ticks of the daemon's timer: neither may signal before the lead
    assert "preempt_signal" not in node.events(lease_id)
    node.step(1)
    node.until_event(lease_id, "preempt_signal")
    wait_for(lambda: log.read_text().count("signal ") == 2, 30, what="both processes signalled")
    heard = sorted(line for line in log.read_text().splitlines() if line.startswith("signal"))
    assert heard == sorted([f"signal {holder} SIGUSR1", f"signal {worker} SIGUSR1"])
    node.step(5 * MINUTE - 1)
    time.sleep(1.2)  # nor kill before the deadline
    assert node.lease(lease_id)["state"] == "active" and _bob_lease(node) is None
    node.step(1)
    node.until_event(lease_id, "preempted")
    wait_for(lambda: gone(holder) and gone(worker), 30, what="what was left killed")
    wait_for(lambda: _bob_lease(node) is not None, 30, what="bob's grant")
    events = node.events(lease_id)  # `ending`: its owner's 1-minute threshold
    assert events == ["granted", "preempt_warning", "preempt_signal", "ending", "preempted"]
    ended = node.lease(lease_id)
    assert ended["state"] == "preempted"
    assert ended["preemption"]["state"] == "killed"
    assert ended["ended_at"] == ended["preemption"]["deadline_at"]
    assert overlapping_leases(node.paths.state_dir / "ledger.sqlite3") == []


def test_an_acknowledgement_ends_the_lease_at_once_and_hands_its_gpus_over(node: Node) -> None:
    """alice's job acknowledges at the warning: her lease ends then, recorded with the path,
    and bob is granted at the same moment of the daemon's clock, long before the deadline."""
    log = node.start_holder("alice", "ack", "alice", count=4)
    lease_id, holder, _ = holder_pids(log)
    node.step(40 * MINUTE)  # past its minimum (30m), within its TTL (1h: renewed in real time)
    _bob_waits(node)
    wait_for(lambda: _bob_lease(node) is not None, 30, what="bob's grant")
    history = node.history(lease_id)
    assert [event for event, _ in history] == [
        "granted",
        "preempt_warning",
        "checkpoint_done",
        "preempted",
    ]
    assert history[2][1] == f"/ckpt/{holder}"
    ended = node.lease(lease_id)
    assert ended["preemption"]["state"] == "acknowledged" and not ended["preemption"]["late"]
    assert ended["last_checkpoint"]["path"] == f"/ckpt/{holder}"
    with node.client() as client:
        (bob,) = [lease for lease in client.leases() if lease.label == "bob"]
    assert bob.created_at == ended["ended_at"] < ended["preemption"]["deadline_at"]
    wait_for(lambda: gone(holder), 30, what="alice's job gone after its acknowledgement")


def test_an_acknowledgement_after_the_deadline_is_recorded_as_late_once(node: Node) -> None:
    """A detached preemptible lease (no process to kill) ends at its deadline; alice's
    acknowledgement afterwards is recorded as late and changes nothing else; a second one is
    refused."""
    done = node.ctl("alice", "--json", "allocate", "-n", "4", "--preemptible", "--ttl", "1d")
    assert done.returncode == 0, done.stderr
    lease_id = json.loads(done.stdout)["id"]
    node.step(HOUR)
    _bob_waits(node)
    node.until_event(lease_id, "preempt_warning")
    node.step(6 * MINUTE)
    node.until_event(lease_id, "preempted")
    late = node.ctl("alice", "checkpoint-done", "/scratch/late.pt", "--lease", lease_id)
    assert late.returncode == 0, late.stderr
    assert "late: after the deadline" in late.stdout
    assert node.lease(lease_id)["preemption"]["late"] is True
    assert node.lease(lease_id)["preemption"]["state"] == "killed"
    again = node.ctl("alice", "checkpoint-done", "/scratch/again.pt", "--lease", lease_id)
    assert again.returncode == 2 and "lease_not_active" in again.stderr
    assert node.events(lease_id).count("checkpoint_done") == 1


def test_bob_cannot_acknowledge_alices_lease(node: Node) -> None:
    """Only the owner acknowledges: bob's checkpoint for alice's lease under preemption is
    refused (permission_denied, exit 5) and changes nothing: the lease runs to its deadline."""
    log = node.start_holder("alice", "ignore", "alice", count=4)
    lease_id, _, _ = holder_pids(log)
    node.step(40 * MINUTE)
    _bob_waits(node)
    node.until_event(lease_id, "preempt_warning")
    forged = node.ctl("bob", "checkpoint-done", "/tmp/x", "--lease", lease_id)
    assert forged.returncode == 5 and "permission_denied" in forged.stderr
    assert node.lease(lease_id)["state"] == "active"
    assert "checkpoint_done" not in node.events(lease_id)
    with node.client() as root, pytest.raises(PermissionDenied, match="only its owner"):
        root.checkpoint_done(lease_id, "/tmp/root")


def test_bob_cannot_make_his_lease_non_preemptible_after_the_grant(node: Node) -> None:
    """No call changes a lease's terms: a renew naming `preemptible` is refused as an unknown
    field; the same request id sent again without it gets the same preemptible lease; a
    `preemptible: false` with a requeue is preemptible still."""
    script = (
        "import json, sys\n"
        "from gpulease import Client\n"
        "c = Client(sys.argv[1])\n"
        "first = c.allocate(1, preemptible=True, request_id='r1', ttl=3600)\n"
        "again = c.allocate(1, request_id='r1', ttl=3600)\n"
        "try:\n"
        "    c.request('POST', f'/v1/leases/{first.id}/renew', {'preemptible': False})\n"
        "    renewed = 'accepted'\n"
        "except Exception as exc:\n"
        "    renewed = exc.code\n"
        "print(json.dumps([first.id, again.id, again.raw['preemptible'] is not None, renewed]))\n"
    )
    done = node.users.run("bob", ["-c", script, node.socket])
    assert done.returncode == 0, done.stderr
    first, again, preemptible, renewed = json.loads(done.stdout)
    assert (first == again, preemptible, renewed) == (True, True, "invalid_request")
    assert node.lease(first)["preemptible"] is not None


def test_the_owner_is_warned_at_its_thresholds_once_across_a_restart(node: Node) -> None:
    """The owner's notices: one at the decision ("is preempted in 6m"), one at their
    1-minute threshold, told once each though the daemon restarts between them."""
    done = node.ctl("alice", "--json", "allocate", "-n", "4", "--preemptible", "--ttl", "1d")
    lease_id = json.loads(done.stdout)["id"]
    node.step(HOUR)
    _bob_waits(node)
    node.until_event(lease_id, "preempt_warning")
    node.restart()
    node.step(5 * MINUTE + 1)
    node.until_event(lease_id, "ending")
    with node.client() as client:
        titles = [
            n["title"]
            for n in client.notifications(everyone=True, limit=500)["notices"]
            if n["kind"] == "ending"
        ]
    assert titles == [
        f"lease {lease_id} is preempted in 6m",
        f"lease {lease_id} is preempted in 1m",
    ]


def test_a_revoke_with_a_grace_warns_its_owner_of_the_kill(node: Node) -> None:
    """A `run` lease revoked: its owner's `ending` notice (reason revoke) and the event on its
    stream, in the revoke's transaction, once."""
    run = node.start_ctl("alice", "run", "run", "-n", "1", "--", "sleep", "600")
    wait_for(lambda: _held(node), 30, what="alice's run")
    with node.client() as client:
        (lease,) = client.leases()
        wait_for(lambda: len(client.lease(lease.id).raw["processes"]) == 2, 30, what="sleep")
        client.revoke(lease.id, "maintenance")
        notices = client.notifications(everyone=True)["notices"]
    assert run.wait(60) == 7, node.log("run")  # its command stopped, nothing left behind
    ending = [n for n in notices if n["kind"] == "ending"]
    assert [n["data"]["reason"] for n in ending] == ["revoke"]
    assert (
        ending[0]["title"]
        == f"lease {lease.id} (sleep 600) was revoked: its processes are stopped in 30s"
    )
    assert node.events(lease.id)[-2:] == ["ending", "revoked"]  # the warning, then the end


def _held(node: Node) -> bool:
    with node.client() as client:
        return bool(client.leases())
