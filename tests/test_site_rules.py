"""Limits and admins on a shared node, enforced by a real daemon for real users."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpulease import QuotaExceeded

from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.rules_harness import SteppedClock, daemon_with_config
from tests.system_users import SystemUsers, open_to_everyone

CLIENT_CALL = """
import json, sys
from gpulease import Client, GpuallocError
try:
    with Client(sys.argv[1]) as c:
        print(json.dumps({"ok": eval(sys.argv[2])}, default=lambda o: o.raw))
except GpuallocError as e:
    print(json.dumps({"code": e.code, "message": e.message, "details": e.details}))
"""


def rules_toml(users: SystemUsers) -> str:
    n = users.name
    return f"""
admin_groups = ["{n("gpuadmin")}"]
default_policy = "simple"

[limits]
max_gpus = 3
max_ttl_seconds = 7200
max_waiting = 1

[limits.group.{n("students")}]
max_gpus = 1

[limits.group.{n("staff")}]
max_gpus = 2

[limits.user.{n("carol")}]
max_gpus = 4

[limits.user.{n("dave")}]
max_ttl_seconds = 600
"""


@pytest.fixture
def node(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> Iterator[tuple[ThreadDaemon, SystemUsers]]:
    """A 4-GPU daemon with the limits above, its socket open to the test users."""
    open_to_everyone(short_dir)
    daemon = daemon_with_config(paths, rules_toml(system_users)).start()
    yield daemon, system_users
    daemon.stop()


def call(users: SystemUsers, who: str, socket: Path, expression: str) -> dict[str, Any]:
    """Evaluate a client expression (`c` is the Client) as the user; its JSON or its error."""
    done = users.run(who, ["-c", CLIENT_CALL, str(socket), expression])
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_group_and_user_overrides_apply_key_by_key(
    node: tuple[ThreadDaemon, SystemUsers],
) -> None:
    """`limits` shows each user the value that applies and where it was set: a user's entry
    over every group, the most generous group over the default, the default for the rest."""
    daemon, users = node
    socket = daemon.paths.socket
    seen = {}
    for who in ("alice", "bob", "carol", "dave"):
        done = users.ctl(who, socket, "limits", "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        seen[who] = {e["limit"]: (e["value"], e["source"]) for e in report["limits"]}
        assert report["user"] == users.name(who)
    n = users.name
    assert seen["alice"]["max_gpus"] == (1, f"group {n('students')}")
    assert seen["bob"]["max_gpus"] == (2, f"group {n('staff')}")
    assert seen["carol"]["max_gpus"] == (4, f"user {n('carol')}")
    assert seen["dave"]["max_gpus"] == (3, "default")
    assert seen["dave"]["max_ttl_seconds"] == (600, f"user {n('dave')}")
    assert seen["alice"]["max_ttl_seconds"] == (7200, "default")
    assert seen["alice"]["max_gpu_hours_per_day"] == (None, "none")
    with daemon.client() as root:
        assert root.limits(n("bob"))["groups"] == sorted([n("bob"), n("students"), n("staff")])


def test_a_request_over_max_gpus_is_refused_with_the_numbers(
    node: tuple[ThreadDaemon, SystemUsers],
) -> None:
    """alice (students: 1 GPU) gets one GPU; a second is `quota_exceeded` naming the limit,
    its value and her use; `gpuallocctl` exits 6 and prints it."""
    daemon, users = node
    socket = daemon.paths.socket
    assert "ok" in call(users, "alice", socket, "c.allocate(1)")
    refused = call(users, "alice", socket, "c.allocate(1)")
    assert refused["code"] == "quota_exceeded"
    assert refused["details"] == {"limit": "max_gpus", "value": 1, "current": 1}
    assert "max_gpus = 1" in refused["message"]
    done = users.ctl("alice", socket, "allocate", "-n", "1")
    assert done.returncode == 6
    assert "[quota_exceeded]" in done.stderr
    with daemon.client() as root:
        assert [lease.user for lease in root.leases()] == [users.name("alice")]


def test_a_waiting_request_over_a_limit_is_refused_at_once_not_queued(
    node: tuple[ThreadDaemon, SystemUsers], short_dir: Path
) -> None:
    """With every GPU taken, bob's wait for 3 GPUs (limit 2) and alice's second wait
    (max_waiting = 1) are refused at once; alice's first wait queues and is served."""
    daemon, users = node
    socket = daemon.paths.socket
    taken = call(users, "carol", socket, "c.allocate(4)")["ok"]
    waiter = users.start(
        "alice",
        ["-m", "gpuallocd.cli", "--socket", str(socket), "allocate", "-n", "1", "--wait"],
        short_dir / "alice.log",
    )
    with daemon.client() as root:
        wait_for(lambda: len(root.queue()) == 1, 30)
        second = call(users, "alice", socket, "c.allocate(1, wait=True, timeout=30)")
        assert second["code"] == "quota_exceeded"
        assert second["details"] == {"limit": "max_waiting", "value": 1, "current": 1}
        too_many = call(users, "bob", socket, "c.allocate(3, wait=True, timeout=30)")
        assert too_many["details"] == {"limit": "max_gpus", "value": 2, "current": 0}
        assert [w["owner"]["user"] for w in root.queue()] == [users.name("alice")]
        root.free(taken["id"])
        assert waiter.wait(30) == 0
        assert [lease.user for lease in root.leases()] == [users.name("alice")]


def test_max_ttl_cuts_the_default_and_refuses_a_longer_ttl(
    node: tuple[ThreadDaemon, SystemUsers],
) -> None:
    """dave (max_ttl_seconds = 600) gets 600 s when he asks for no TTL; 1000 s is refused."""
    daemon, users = node
    socket = daemon.paths.socket
    lease = call(users, "dave", socket, "c.allocate(1)")["ok"]
    assert lease["expires_at"] - lease["created_at"] == pytest.approx(600)
    refused = call(users, "dave", socket, "c.allocate(1, ttl=1000)")
    assert refused["details"] == {"limit": "max_ttl_seconds", "value": 600, "current": 1000}
    renewed = call(users, "dave", socket, f"c.renew({lease['id']!r}, 1000)")
    assert renewed["code"] == "quota_exceeded"


def test_admins_revoke_and_their_name_and_reason_are_recorded(
    node: tuple[ThreadDaemon, SystemUsers],
) -> None:
    """dave (gpuadmin) revokes alice's lease; carol may not revoke bob's. The admin record
    names dave and the reason; the lease's history keeps the reason."""
    daemon, users = node
    socket = daemon.paths.socket
    alice = call(users, "alice", socket, "c.allocate(1)")["ok"]
    bob = call(users, "bob", socket, "c.allocate(1)")["ok"]
    refused = users.ctl("carol", socket, "revoke", bob["id"], "--reason", "mine now")
    assert refused.returncode == 5 and "[permission_denied]" in refused.stderr
    done = users.ctl("dave", socket, "revoke", alice["id"], "--reason", "job hung")
    assert done.returncode == 0, done.stderr
    log = users.ctl("carol", socket, "--json", "admin-log")
    actions = json.loads(log.stdout)["actions"]
    assert [(a["action"], a["target"], a["actor"]["user"], a["reason"]) for a in actions] == [
        ("revoke", alice["id"], users.name("dave"), "job hung")
    ]
    with daemon.client() as root:
        last = root.history(alice["id"])[-1]
        assert (last["event"], last["detail"], last["actor_uid"]) == (
            "revoked",
            "job hung",
            users.uid("dave"),
        )
        assert root.lease(bob["id"]).state == "active"


def test_leases_of_one_user_and_free_mine(node: tuple[ThreadDaemon, SystemUsers]) -> None:
    """`leases --user` lists that user's leases only; `free --mine` frees all of the caller's
    leases and no one else's."""
    daemon, users = node
    socket = daemon.paths.socket
    alice = call(users, "alice", socket, "c.allocate(1)")["ok"]
    for _ in range(2):
        call(users, "bob", socket, "c.allocate(1)")
    listed = users.ctl("carol", socket, "--json", "leases", "--user", users.name("bob"))
    assert {lease["owner"]["user"] for lease in json.loads(listed.stdout)["leases"]} == {
        users.name("bob")
    }
    assert len(json.loads(listed.stdout)["leases"]) == 2
    freed = users.ctl("bob", socket, "--json", "free", "--mine")
    assert freed.returncode == 0, freed.stderr
    assert [lease["state"] for lease in json.loads(freed.stdout)["leases"]] == ["freed"] * 2
    with daemon.client() as root:
        assert [lease.id for lease in root.leases()] == [alice["id"]]
    nothing = users.ctl("bob", socket, "free", "--mine")
    assert nothing.stdout.strip() == "you hold no lease"


def test_gpu_hours_per_day_is_a_rolling_24_hours_from_the_ledger(paths: DaemonPaths) -> None:
    """With max_gpu_hours_per_day = 10, two GPUs held 5 hours use the day's budget: the next
    request is refused as every budget is, with the hours used and when enough frees up;
    `limits` shows what remains of it; a day later it is granted again."""
    clock = SteppedClock()
    text = 'default_policy = "simple"\n[limits]\nmax_gpu_hours_per_day = 10\n'
    daemon = daemon_with_config(paths, text, clock=clock).start()
    try:
        with daemon.client() as client:
            lease = client.allocate(2, ttl=6 * 3600)
            clock.advance(5 * 3600)
            with pytest.raises(QuotaExceeded) as refused:
                client.allocate(1)
            assert refused.value.details["limit"] == "max_gpu_hours_per_day"
            assert refused.value.details["current"] == pytest.approx(10, abs=0.01)
            assert "GPU-hours of 10 in the last 1 day(s): max_gpu_hours_per_day = 10" in str(
                refused.value
            )
            began = clock() - 5 * 3600  # the use leaves the window from its start on
            assert refused.value.details["frees_at"] == pytest.approx(began + 86400, abs=5)
            shown = {row["limit"]: row for row in client.limits()["limits"]}
            assert shown["max_gpu_hours_per_day"]["remaining"] == 0.0
            client.free(lease.id)
            clock.advance(24 * 3600)
            assert client.allocate(1).state == "active"
    finally:
        daemon.stop()
