"""Fair-share order of the wait queue: the light user first, and nobody starves."""

from __future__ import annotations

import json
import pwd
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpulease import Client, Lease

from gpuallocd.model import LeaseSpan
from gpuallocd.policies.fair_share import (
    FairShareWaiter,
    decayed_gpu_hours,
    fair_share_order,
)
from tests.harness import DaemonPaths, HandClock, ThreadDaemon, wait_for
from tests.system_users import SystemUsers, open_to_everyone

HOUR = 3600.0
LONG_TTL = "100h"

# Run as a user: N waiting requests of one GPU each, one thread (and connection) each.
MANY_WAITERS = """
import sys, threading
from gpulease import Client

def one(i):
    with Client(sys.argv[1], timeout=600) as client:
        lease = client.allocate(1, wait=True, ttl=360000, label=f"job{i}")
        print("granted", i, lease.id, flush=True)

threads = [threading.Thread(target=one, args=(i,)) for i in range(int(sys.argv[2]))]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


@pytest.fixture
def fair_daemon(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> Iterator[tuple[ThreadDaemon, HandClock]]:
    open_to_everyone(short_dir)
    clock = HandClock()
    daemon = ThreadDaemon(
        paths,
        clock=clock,
        default_policy="simple",
        queue_order="fair-share",
        fair_share_wait_weight=8.0,
    ).start()
    yield daemon, clock
    daemon.stop()


def _allocate(users: SystemUsers, who: str, socket: Path, *args: str) -> dict[str, object]:
    done = users.ctl(who, socket, "--json", "allocate", "--ttl", LONG_TTL, *args)
    assert done.returncode == 0, done.stderr
    lease: dict[str, object] = json.loads(done.stdout)
    return lease


def test_light_users_one_job_is_served_before_heavy_users_fifty(
    system_users: SystemUsers,
    fair_daemon: tuple[ThreadDaemon, HandClock],
    short_dir: Path,
) -> None:
    """alice held the 4 GPUs for an hour; carol holds them now. alice queues 50 jobs, then
    bob one. The first GPU that comes free goes to bob; alice's 50 still wait. `queue` says
    why."""
    users = system_users
    daemon, clock = fair_daemon
    socket = daemon.paths.socket
    old = _allocate(users, "alice", socket, "-n", "4")
    clock.step(HOUR)
    assert users.ctl("alice", socket, "free", str(old["id"])).returncode == 0
    held = [_allocate(users, "carol", socket, "-n", "1") for _ in range(4)]
    argv = ["-c", MANY_WAITERS, str(socket), "50"]
    heavy = users.start("alice", argv, short_dir / "alice.log")
    bob = None
    try:
        with daemon.client() as root:
            wait_for(lambda: len(root.queue()) == 50, 60, what="alice's 50 waiters")
            clock.step(60)
            bob_argv = ["-m", "gpuallocd.cli", "--socket", str(socket), "--json", "allocate"]
            bob = users.start("bob", [*bob_argv, "-n", "1", "--wait"], short_dir / "bob.log")
            wait_for(lambda: len(root.queue()) == 51, 30, what="bob's waiter")
            first = root.queue()[0]
            assert first["owner"]["user"] == users.name("bob")
            assert "used 0.00 decayed GPU-h" in first["priority"]["why"]
            last = root.queue()[-1]
            assert last["priority"]["usage_gpu_hours"] == pytest.approx(4.0, abs=0.05)
            shown = users.ctl("carol", socket, "queue", "-v").stdout
            assert "PRIO" in shown and "priority: " in shown

            bob_log = short_dir / "bob.log"  # bob's waiting line, then his lease
            wait_for(lambda: "queued 1 of 51" in bob_log.read_text(), 30, what="bob's line")
            assert users.ctl("carol", socket, "free", str(held[0]["id"])).returncode == 0
            assert bob.wait(30) == 0
            log = bob_log.read_text()
            granted = json.loads(log[log.index("{") :])
            assert granted["owner"]["user"] == users.name("bob")
            waiting = root.queue()
            assert len(waiting) == 50
            assert {w["owner"]["user"] for w in waiting} == {users.name("alice")}
    finally:
        for process in (heavy, bob):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)


def test_a_heavy_users_waiter_is_served_under_a_steady_stream(
    system_users: SystemUsers, fair_daemon: tuple[ThreadDaemon, HandClock], short_dir: Path
) -> None:
    """alice used 20 GPU-hours and waits; root queues a new job every 15 minutes and frees
    one GPU each time. Root's jobs go first while alice's use outweighs her wait, and then
    alice is served: her priority grows 8 per hour waited (fair_share_wait_weight)."""
    users = system_users
    daemon, clock = fair_daemon
    socket = daemon.paths.socket
    old = _allocate(users, "alice", socket, "-n", "4")
    clock.step(5 * HOUR)
    assert users.ctl("alice", socket, "free", str(old["id"])).returncode == 0
    root = daemon.client()
    leases: list[Lease] = [root.allocate(1, ttl=360000) for _ in range(4)]
    argv = ["-m", "gpuallocd.cli", "--socket", str(socket), "allocate", "-n", "1", "--wait"]
    alice = users.start("alice", [*argv, "--ttl", LONG_TTL], short_dir / "alice.log")
    granted: list[Lease] = []
    threads: list[threading.Thread] = []

    def wait_for_one() -> None:
        with Client(socket, timeout=600) as client:
            granted.append(client.allocate(1, wait=True, ttl=360000))

    try:
        wait_for(lambda: len(root.queue()) == 1, 30, what="alice's waiter")
        served_at = None
        for step in range(1, 16):
            threads.append(threading.Thread(target=wait_for_one, daemon=True))
            threads[-1].start()
            wait_for(lambda: len(root.queue()) == 2, 30, what="root's new waiter")
            clock.step(HOUR / 4)
            before = len(granted)
            root.free(leases.pop(0).id)
            wait_for(lambda n=before: alice.poll() is not None or len(granted) > n, 30)
            if alice.poll() is not None:
                served_at = step
                break
            leases.append(granted[-1])
        assert alice.returncode == 0
        assert served_at is not None and served_at > 1, "root's stream went first at first"
        assert served_at <= 12  # within the bound that her use and the wait weight give
        root.free(leases.pop(0).id)  # for root's last waiter
        for thread in threads:
            thread.join(30)
        assert len(granted) == served_at
    finally:
        if alice.poll() is None:
            alice.kill()
            alice.wait(10)
        root.close()


def test_order_is_by_decayed_use_then_arrival() -> None:
    """Pure: the account that used less goes first; equal use keeps the arrival order."""
    spans = [
        LeaseSpan(1, "heavy", 4.0, created_at=0.0, ended_at=HOUR),
        LeaseSpan(2, "light", 1.0, created_at=0.0, ended_at=HOUR),
    ]
    usage = decayed_gpu_hours(spans, now=HOUR, half_life_hours=1e9)
    assert usage == pytest.approx({"heavy": 4.0, "light": 1.0})
    waiters = [
        FairShareWaiter("h1", "heavy", HOUR),
        FairShareWaiter("l1", "light", HOUR),
        FairShareWaiter("n1", "new", HOUR),
        FairShareWaiter("n2", "new", HOUR),
    ]
    order = fair_share_order(waiters, usage, now=HOUR, wait_weight=1.0)
    assert [p.waiter_id for p in order] == ["n1", "n2", "l1", "h1"]


def test_use_halves_every_half_life() -> None:
    """Pure: a GPU-hour held one half-life ago counts half."""
    span = [LeaseSpan(1, "a", 1.0, created_at=0.0, ended_at=60.0)]
    now = 60.0 + 10 * HOUR
    decayed = decayed_gpu_hours(span, now=now, half_life_hours=10.0)["a"]
    assert decayed == pytest.approx(60.0 / HOUR / 2, rel=1e-3)


def test_no_waiter_starves_behind_any_number_of_newcomers() -> None:
    """Pure: a waiter whose account used U GPU-hours is ahead of every later arrival, of
    any account, after U / wait_weight hours of waiting."""
    used, weight = 40.0, 4.0
    usage = {"heavy": used, **{f"u{i}": 0.0 for i in range(100)}}
    bound = used / weight * HOUR
    for waited in (bound - 60.0, bound + 60.0):
        now = waited
        newcomers = [FairShareWaiter(f"n{i}", f"u{i}", now) for i in range(100)]
        order = fair_share_order(
            [FairShareWaiter("old", "heavy", 0.0), *newcomers], usage, now=now, wait_weight=weight
        )
        first = order[0].waiter_id == "old"
        assert first == (waited > bound)


def test_holds_of_blocked_waiters_follow_the_fair_share_order(
    system_users: SystemUsers, fair_daemon: tuple[ThreadDaemon, HandClock], short_dir: Path
) -> None:
    """bob used 4 GPU-hours; alice holds GPU 0. carol (no use) waits for all 4 GPUs: the 3
    free ones are held for her, so bob, behind her in the order, gets none of them, now or
    waiting; when alice frees GPU 0 carol gets all four and bob still waits."""
    users = system_users
    daemon, clock = fair_daemon
    socket = daemon.paths.socket
    old = _allocate(users, "bob", socket, "-n", "4")
    clock.step(HOUR)
    assert users.ctl("bob", socket, "free", str(old["id"])).returncode == 0
    alice = _allocate(users, "alice", socket, "--gpu", "0")
    argv = ["-m", "gpuallocd.cli", "--socket", str(socket), "--json", "allocate", "--ttl", "1h"]
    carol = users.start("carol", [*argv, "-n", "4", "--wait"], short_dir / "carol.log")
    bob = None
    try:
        with daemon.client() as root:
            wait_for(lambda: len(root.queue()) == 1, 30, what="carol's waiter")
            assert users.ctl("bob", socket, "allocate", "-n", "1").returncode == 4
            bob = users.start("bob", [*argv, "-n", "1", "--wait"], short_dir / "bob.log")
            wait_for(lambda: len(root.queue()) == 2, 30, what="bob's waiter")
            order = [w["owner"]["user"] for w in root.queue()]
            assert order == [users.name("carol"), users.name("bob")]
            assert users.ctl("alice", socket, "free", str(alice["id"])).returncode == 0
            assert carol.wait(30) == 0
            assert len(root.queue()) == 1 and bob.poll() is None
    finally:
        for process in (carol, bob):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)


def test_a_light_newcomer_goes_ahead_of_a_heavy_blocked_waiter(
    system_users: SystemUsers, fair_daemon: tuple[ThreadDaemon, HandClock], short_dir: Path
) -> None:
    """bob used 4 GPU-hours and waits for all 4 GPUs while alice holds one. carol, who used
    none, asks for one GPU without waiting: she is ahead of bob in the order, so his hold
    does not bind her and she gets one at once (under fifo she would be refused)."""
    users = system_users
    daemon, clock = fair_daemon
    socket = daemon.paths.socket
    old = _allocate(users, "bob", socket, "-n", "4")
    clock.step(HOUR)
    assert users.ctl("bob", socket, "free", str(old["id"])).returncode == 0
    _allocate(users, "alice", socket, "--gpu", "0")
    argv = ["-m", "gpuallocd.cli", "--socket", str(socket), "allocate", "-n", "4", "--wait"]
    bob = users.start("bob", [*argv, "--ttl", "1h"], short_dir / "bob.log")
    try:
        with daemon.client() as root:
            wait_for(lambda: len(root.queue()) == 1, 30, what="bob's waiter")
            assert {g.state for g in root.status()} == {"leased", "reserved"}
            carol = _allocate(users, "carol", socket, "-n", "1")
            assert carol["state"] == "active"
            assert len(root.queue()) == 1 and bob.poll() is None
    finally:
        bob.kill()
        bob.wait(10)


def test_group_fair_share_follows_the_passwd_primary_group_not_sg(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """`fair_share_by = "group"`: alice used 3 GPU-hours, bob 1. alice waits under `sg
    students` (her process's gid is then students', a group with no use), bob after her:
    her account is still her passwd primary group's, charged her 4 GPU-hours, so bob goes
    first."""
    users = system_users
    alice_entry, bob_entry = (pwd.getpwnam(users.name(u)) for u in ("alice", "bob"))
    assert alice_entry.pw_gid != bob_entry.pw_gid, "needs a primary group per user"
    open_to_everyone(short_dir)
    clock = HandClock()
    daemon = ThreadDaemon(
        paths,
        clock=clock,
        default_policy="simple",
        queue_order="fair-share",
        fair_share_by="group",
    ).start()
    socket = daemon.paths.socket
    waiting: list[subprocess.Popen[str]] = []
    try:
        heavy = _allocate(users, "alice", socket, "-n", "3")
        light = _allocate(users, "bob", socket, "-n", "1")
        clock.step(HOUR)
        for who, lease in (("alice", heavy), ("bob", light)):
            assert users.ctl(who, socket, "free", str(lease["id"])).returncode == 0
        for _ in range(4):
            _allocate(users, "carol", socket, "-n", "1")
        wait = ["allocate", "-n", "1", "--wait", "--ttl", "1h"]
        command = " ".join([users.python, "-m", "gpuallocd.cli", "--socket", str(socket), *wait])
        alice = subprocess.Popen(
            ["sg", users.name("students"), "-c", command],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **users._as("alice"),  # type: ignore[call-overload]
        )
        waiting.append(alice)
        with daemon.client() as root:
            wait_for(lambda: len(root.queue()) == 1, 30, what="alice's waiter")
            bob_argv = ["-m", "gpuallocd.cli", "--socket", str(socket), "allocate", "-n", "1"]
            waiting.append(users.start("bob", [*bob_argv, "--wait"], short_dir / "bob.log"))
            wait_for(lambda: len(root.queue()) == 2, 30, what="bob's waiter")
            queue = root.queue()
        assert [w["owner"]["user"] for w in queue] == [users.name("bob"), users.name("alice")]
        assert queue[1]["priority"]["usage_gpu_hours"] == pytest.approx(3.0, abs=0.05)
        assert queue[0]["priority"]["usage_gpu_hours"] == pytest.approx(1.0, abs=0.05)
    finally:
        for process in waiting:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        daemon.stop()
