"""Advance reservations against a real daemon with real users: backfill before the start, a
lease that would overlap refused, the start and the end on time, and kill -9."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gpulease import Client, ReservationConflict

from tests.harness import DaemonPaths, HandClock, ProcessDaemon, ThreadDaemon, wait_for
from tests.system_users import SystemUsers, open_to_everyone

HOUR = 3600.0


@pytest.fixture
def admin_daemon(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> Iterator[tuple[ThreadDaemon, HandClock]]:
    """dave is an admin (gpuadmin); the default TTL is 8 hours."""
    open_to_everyone(short_dir)
    clock = HandClock()
    daemon = ThreadDaemon(
        paths,
        clock=clock,
        default_policy="simple",
        default_ttl_seconds=8 * HOUR,
        admin_groups=(system_users.name("gpuadmin"),),
    ).start()
    yield daemon, clock
    daemon.stop()


def _json(done: Any) -> Any:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _reserve(users: SystemUsers, socket: Path, *args: str) -> dict[str, Any]:
    reason = ("--reason", "paper deadline")
    found: dict[str, Any] = _json(users.ctl("dave", socket, "--json", "reserve", *args, *reason))
    return found


def _events(client: Client, reservation_id: str) -> dict[str, float]:
    answer = client.request("GET", "/v1/history?limit=1000")
    return {
        e["event"]: e["at"]
        for e in answer["reservation_events"]
        if e["reservation_id"] == reservation_id
    }


def test_backfill_before_a_reservation_and_an_overlapping_lease_refused(
    system_users: SystemUsers, admin_daemon: tuple[ThreadDaemon, HandClock]
) -> None:
    """dave reserves 2 GPUs for bob from 2 hours on. carol may lease one of them for an hour
    (it ends before the start); for 3 hours she is refused with `reservation_conflict`; with
    no TTL given her 8-hour default is cut to end at the start. Only admins reserve."""
    users = system_users
    daemon, clock = admin_daemon
    socket = daemon.paths.socket
    start = clock.now + 2 * HOUR
    made = _reserve(
        users, socket, "-n", "2", "--start", f"@{start}", "--duration", "1h", "--user",
        users.name("bob"),
    )  # fmt: skip
    assert made["state"] == "scheduled" and len(made["gpu_indices"]) == 2
    first, second = made["gpu_indices"]
    refused = users.ctl("carol", socket, "reserve", "-n", "1", "--start", "+1h", "--duration",
                        "1h", "--user", users.name("carol"), "--reason", "mine")  # fmt: skip
    assert refused.returncode == 5  # permission denied: admins only

    backfill = _json(
        users.ctl("carol", socket, "--json", "allocate", "--gpu", str(first), "--ttl", "1h")
    )
    assert [g["index"] for g in backfill["gpus"]] == [first]
    overlap = users.ctl("carol", socket, "allocate", "--gpu", str(second), "--ttl", "3h")
    assert overlap.returncode == 4
    assert "reservation_conflict" in overlap.stderr or "reservation" in overlap.stderr
    assert "at most 2h (--ttl)" in overlap.stderr
    with Client(socket) as root, pytest.raises(ReservationConflict) as caught:
        root.allocate_specific([second], ttl=3 * HOUR)
    assert caught.value.details["max_ttl_seconds"] == pytest.approx(2 * HOUR)

    shortened = _json(users.ctl("carol", socket, "--json", "allocate", "--gpu", str(second)))
    assert shortened["expires_at"] == pytest.approx(start)
    # Other GPUs keep the full default TTL.
    elsewhere = _json(users.ctl("carol", socket, "--json", "allocate", "-n", "1"))
    assert elsewhere["expires_at"] == pytest.approx(clock.now + 8 * HOUR)


def test_a_reservation_starts_and_ends_on_time(
    system_users: SystemUsers, admin_daemon: tuple[ThreadDaemon, HandClock], short_dir: Path
) -> None:
    """carol holds GPUs 0, 1 and 3 when dave reserves GPUs 2 and 3 for bob from an hour on:
    the reservation waits for carol's lease on GPU 3. At the start GPU 2 is bob's only;
    alice's waiter does not get GPU 3 when carol frees it, bob does. At the end, on time,
    alice's waiter gets GPU 2. The history has the start and the end at their times."""
    users = system_users
    daemon, clock = admin_daemon
    socket = daemon.paths.socket
    carol = _json(
        users.ctl("carol", socket, "--json", "allocate", "--gpu", "0", "--gpu", "1", "--ttl",
                  "10h")
    )  # fmt: skip
    carol3 = _json(users.ctl("carol", socket, "--json", "allocate", "--gpu", "3", "--ttl", "2h"))
    made = _reserve(users, socket, "--gpu", "2", "--gpu", "3", "--start", "+1h", "--duration",
                    "1h", "--user", users.name("bob"))  # fmt: skip
    assert made["gpu_indices"] == [2, 3]
    assert [w["lease_id"] for w in made["waiting_for"]] == [carol3["id"]]
    start, end = made["start_at"], made["end_at"]
    assert start == pytest.approx(clock.now + HOUR)
    alice = None
    with Client(socket) as root:
        assert {s.index: s.state for s in root.status()}[2] == "free"
        clock.step(HOUR)
        wait_for(lambda: "started" in _events(root, made["id"]), 10, what="the start")
        assert _events(root, made["id"])["started"] == start
        assert {s.index: s.state for s in root.status()}[2] == "reserved"
        taken = users.ctl("carol", socket, "allocate", "--gpu", "2", "--ttl", "60")
        assert taken.returncode == 4 and "holds its GPUs" in taken.stderr
        queue = users.ctl("carol", socket, "queue").stdout
        assert f"reservation {made['id']}" in queue and "waits for leases of" in queue
        assert "reservation" in users.ctl("carol", socket, "status").stdout
        try:
            argv = ["-m", "gpuallocd.cli", "--socket", str(socket), "--json", "allocate"]
            alice = users.start("alice", [*argv, "-n", "1", "--wait"], short_dir / "alice.log")
            wait_for(lambda: len(root.queue()) == 1, 30, what="alice's waiter")
            assert users.ctl("carol", socket, "free", carol3["id"]).returncode == 0
            bob = _json(users.ctl("bob", socket, "--json", "allocate", "--gpu", "3"))
            assert [g["index"] for g in bob["gpus"]] == [3]
            assert len(root.queue()) == 1 and alice.poll() is None
            clock.step(end - clock.now)
            assert alice.wait(30) == 0
            log = (short_dir / "alice.log").read_text()
            assert [g["index"] for g in json.loads(log[log.index("{") :])["gpus"]] == [2]
            # The end is recorded by the housekeeping tick; a grant past the end may come first.
            wait_for(lambda: "ended" in _events(root, made["id"]), 10, what="the end")
            assert _events(root, made["id"])["ended"] == end
            assert root.reservations() == []
            assert [r["state"] for r in root.reservations(include_ended=True)] == ["ended"]
            usage = root.usage(since=start - HOUR)
            assert usage["reservations"][0]["gpu_hours"] == pytest.approx(2.0)
        finally:
            if alice is not None and alice.poll() is None:
                alice.kill()
                alice.wait(10)
    assert carol["state"] == "active"


def test_unreserve_frees_the_gpus_and_only_admins_may(
    system_users: SystemUsers, admin_daemon: tuple[ThreadDaemon, HandClock]
) -> None:
    """A running reservation of a group cancelled by an admin frees its GPUs at once (carol
    may not cancel it); two reservations never overlap on a GPU."""
    users = system_users
    daemon, _ = admin_daemon
    socket = daemon.paths.socket
    made = _reserve(users, socket, "--gpu", "1", "--start", "now", "--duration", "2h",
                    "--group", users.name("students"))  # fmt: skip
    assert made["state"] == "active"
    member = _json(users.ctl("alice", socket, "--json", "allocate", "--gpu", "1", "--ttl", "60"))
    assert users.ctl("alice", socket, "free", member["id"]).returncode == 0
    assert users.ctl("carol", socket, "allocate", "--gpu", "1").returncode == 4
    assert users.ctl("carol", socket, "unreserve", made["id"]).returncode == 5
    assert users.ctl("dave", socket, "unreserve", made["id"]).returncode == 0
    assert users.ctl("carol", socket, "allocate", "--gpu", "1").returncode == 0
    with Client(socket) as root:
        bob = users.name("bob")
        root.reserve(gpus=[0], start_in=3600, duration=3600, user=bob, reason="a")
        with pytest.raises(ReservationConflict):  # two reservations never share a GPU
            root.reserve(gpus=[0], start_in=5400, duration=3600, user=bob, reason="b")
        after = root.reserve(gpus=[0], start_in=7200, duration=60, user=bob, reason="c")
        assert after["gpu_indices"] == [0]
    events = users.ctl("carol", socket, "history").stdout
    assert f"reservation {made['id']}" in events and "cancelled" in events


def test_reservations_survive_kill_9(process_daemon: Callable[..., ProcessDaemon]) -> None:
    """A reservation to come and a running one, then kill -9: the restarted daemon shows
    both and still holds their GPUs (backfill allowed, overlap refused)."""
    daemon = process_daemon()
    with daemon.client() as client:
        later = client.reserve(
            gpus=[1], start_in=2 * HOUR, duration=HOUR, user="nobody", reason="demo"
        )
        now = client.reserve(gpus=[2], start_in=0, duration=HOUR, user="nobody", reason="run")
        wait_for(lambda: "started" in _events(client, now["id"]), 10, what="the start")
    daemon.kill()
    restarted = process_daemon()
    with restarted.client() as client:
        found = {r["id"]: r for r in client.reservations()}
        assert set(found) == {later["id"], now["id"]}
        assert found[now["id"]]["state"] == "active"
        assert found[later["id"]]["start_at"] == later["start_at"]
        with pytest.raises(ReservationConflict):
            client.allocate_specific([2], ttl=60)
        with pytest.raises(ReservationConflict):
            client.allocate_specific([1], ttl=3 * HOUR)
        backfill = client.allocate_specific([1], ttl=HOUR)
        assert backfill.expires_at < later["start_at"]
        assert list(_events(client, now["id"])) == ["created", "started"]
    assert time.time() < now["end_at"]


def _wait_for_one(daemon: ThreadDaemon) -> str:
    with Client(daemon.paths.socket) as client:
        return client.allocate(1, wait=True, ttl=60).id


def test_a_waiters_estimated_start_counts_a_running_reservation(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """Every GPU is reserved for someone else for an hour: root's waiter is estimated to start
    at the reservation's end, and is served at once when an admin cancels it."""
    clock = HandClock()
    daemon = start_daemon(clock=clock, default_policy="simple")
    granted: list[str] = []
    with daemon.client() as client:
        made = client.reserve(
            gpus=[0, 1, 2, 3], start_in=0, duration=HOUR, user="nobody", reason="all"
        )
        waiter = threading.Thread(target=lambda: granted.append(_wait_for_one(daemon)))
        waiter.start()
        wait_for(lambda: len(client.queue()) == 1, 30, what="root's waiter")
        queued = client.queue()[0]
        assert queued["estimated_start_at"] == pytest.approx(made["end_at"])
        client.unreserve(made["id"])
        waiter.join(30)
        assert len(granted) == 1


def test_the_policy_chooses_a_reservations_gpus_with_the_topology_in_mind(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """GPU 0 is leased past the start; a reservation of 2 GPUs gets the NVLink pair free at
    the start (2, 3), not GPU 1 and a GPU across the sockets. The next one of 2 in that
    window gets the other pair, 0 and 1, and waits for the lease on GPU 0."""
    clock = HandClock()
    daemon = start_daemon(clock=clock, default_policy="best-effort")
    with daemon.client() as client:
        client.allocate_specific([0], ttl=3 * HOUR)
        first = client.reserve(count=2, start_in=HOUR, duration=HOUR, user="nobody", reason="a")
        assert first["gpu_indices"] == [2, 3]
        second = client.reserve(count=2, start_in=HOUR, duration=HOUR, user="nobody", reason="b")
        assert second["gpu_indices"] == [0, 1]
        assert [w["gpus"] for w in second["waiting_for"]] == [[0]]
