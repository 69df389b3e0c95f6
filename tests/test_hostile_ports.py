"""Hostile use of the daemon's TCP ports (dashboard, metrics) by real local users against a
real daemon process: connections from many loopback addresses, a loop on the dashboard's
JSON, the port taken before the daemon starts."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuallocd.api.tcp_peers import GONE, local_owner
from tests.harness import DaemonPaths, ProcessDaemon, ctl_argv, wait_for
from tests.system_users import SystemUsers, open_to_everyone

PER_USER = 16
# Run as alice: PER_USER connections to the port from each of 127.0.0.2 ... 127.0.0.66,
# held until stdin closes; prints how many the daemon left open a moment later.
LOOPBACK_FLOOD = """
import resource, socket, sys, time
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
port, each = int(sys.argv[1]), int(sys.argv[2])
held = []
for last in range(2, 67):
    for _ in range(each):
        s = socket.socket()
        try:
            s.bind((f"127.0.0.{last}", 0))
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        held.append(s)
print(len(held), flush=True)
sys.stdin.read()
"""

STATUS = """
import sys
from gpulease import Client
with Client(sys.argv[1], timeout=10) as c:
    print(len(c.status()))
"""

# Run as alice: /api/live in a loop from 8 threads, each from an address of its own, until
# stdin closes; prints how many answers of each status she got.
LIVE_LOOP = """
import collections, http.client, json, sys, threading
port = int(sys.argv[1])
stop = threading.Event()
seen = collections.Counter()

def loop(last):
    while not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                          source_address=(f"127.0.0.{last}", 0))
        try:
            conn.request("GET", "/api/live")
            seen[conn.getresponse().status] += 1
        except OSError:
            seen["error"] += 1
        finally:
            conn.close()

threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(2, 10)]
for t in threads:
    t.start()
print("looping", flush=True)
sys.stdin.read()
stop.set()
print(json.dumps({str(k): v for k, v in seen.items()}), flush=True)
"""

# Run as bob: N page loads, one every 0.3 s (a person clicking), each one's status.
PAGE_LOADS = """
import json, sys, time, urllib.error, urllib.request
statuses = []
for _ in range(int(sys.argv[2])):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=10) as r:
            statuses.append(r.status)
    except urllib.error.HTTPError as e:
        statuses.append(e.code)
    time.sleep(0.3)
print(json.dumps(statuses))
"""

# Run as alice: hold a listening socket on the port until stdin closes.
SQUAT = """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("bound", flush=True)
sys.stdin.read()
"""

# Run as alice: one connection from 127.0.0.9, held (until stdin closes) or closed at once
# after a request.
HOLD_ONE = """
import socket, sys
s = socket.socket()
s.bind(("127.0.0.9", 0))
s.connect(("127.0.0.1", int(sys.argv[1])))
if sys.argv[2] == "close":
    s.sendall(b"GET / HTTP/1.1\\r\\n\\r\\n")
    s.close()
else:
    print("connected", flush=True)
    sys.stdin.read()
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_as(users: SystemUsers, short: str, script: str, *args: str) -> subprocess.Popen[str]:
    """`python -c script args` as the user, stdin and stdout piped."""
    return subprocess.Popen(
        [users.python, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **users._as(short),  # type: ignore[call-overload]
    )


@pytest.fixture
def dashboard(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> Iterator[tuple[ProcessDaemon, int]]:
    """A daemon with the dashboard on a loopback port, open to the test users."""
    open_to_everyone(short_dir)
    port = free_port()
    daemon = ProcessDaemon(
        paths,
        default_policy="simple",
        dashboard_listen=f"127.0.0.1:{port}",
        max_connections=512,
        max_connections_per_user=PER_USER,
        request_head_timeout_seconds=60.0,
    )
    daemon.start()
    yield daemon, port
    daemon.kill()


def test_loopback_addresses_give_one_user_no_more_connections(
    system_users: SystemUsers, dashboard: tuple[ProcessDaemon, int]
) -> None:
    """alice opens 16 connections to the dashboard from each of 65 loopback addresses (more
    than the API's 512 slots): bob's API requests are served while she holds them, the port
    counts them as hers (one user, one count) and the log says so."""
    daemon, port = dashboard
    flood = start_as(system_users, "alice", LOOPBACK_FLOOD, str(port), str(PER_USER))
    try:
        assert flood.stdout is not None
        assert int(flood.stdout.readline()) > 0
        for _ in range(3):
            done = system_users.run("bob", ["-c", STATUS, str(daemon.paths.socket)], timeout=30)
            assert (done.returncode, done.stdout.strip()) == (0, "4"), done.stderr
        with daemon.client(timeout=10) as root:
            assert len(root.status()) == 4
    finally:
        flood.kill()
        flood.communicate(timeout=30)
    assert f"refused a connection of uid {system_users.uid('alice')}" in daemon.stderr()


def test_a_loop_on_the_dashboard_json_leaves_pages_to_others(
    system_users: SystemUsers, dashboard: tuple[ProcessDaemon, int]
) -> None:
    """alice loops on /api/live from 8 threads and 8 addresses; bob's 24 page loads (one
    every 0.3 s) are all answered 200, while alice is told 429 for most of hers."""
    _, port = dashboard
    loop = start_as(system_users, "alice", LIVE_LOOP, str(port))
    try:
        assert loop.stdout is not None
        assert loop.stdout.readline().strip() == "looping"
        bob = system_users.run("bob", ["-c", PAGE_LOADS, str(port), "24"], timeout=120)
        assert bob.returncode == 0, bob.stderr
        assert json.loads(bob.stdout) == [200] * 24
        out, err = loop.communicate("", timeout=60)
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.communicate(timeout=30)
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen.get("429", 0) > seen.get("200", 0) > 0, err


def test_a_port_taken_first_leaves_the_api_served_and_is_named(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> None:
    """alice listens on the dashboard's port before the daemon starts: the daemon still serves
    the API; health, doctor and the log name the port it could not take; once she lets go,
    the daemon takes the port (it tries again every 10 s) and serves the page there."""
    open_to_everyone(short_dir)
    port = free_port()
    squat = start_as(system_users, "alice", SQUAT, str(port))
    daemon = ProcessDaemon(paths, default_policy="simple", dashboard_listen=f"127.0.0.1:{port}")
    try:
        assert squat.stdout is not None and squat.stdout.readline().strip() == "bound"
        daemon.start()
        with daemon.client(timeout=10) as client:
            health = client.health()
            assert len(client.allocate(1).gpus) == 1
        (problem,) = [p for p in health["ports"] if not p["serving"]]
        assert problem["port"] == "dashboard"
        assert problem["listen"] == f"127.0.0.1:{port}"
        assert "in use" in problem["error"]
        doctor = subprocess.run(
            ctl_argv(daemon.paths.socket, "doctor"), capture_output=True, text=True, timeout=60
        )
        assert f"cannot serve the dashboard on 127.0.0.1:{port}" in doctor.stdout
        assert f"cannot serve the dashboard on 127.0.0.1:{port}" in daemon.stderr()
        squat.kill()
        squat.communicate(timeout=30)
        with daemon.client(timeout=10) as client:

            def served() -> bool:
                return bool(client.health()["ports"][0]["serving"])

            wait_for(served, 60, interval=0.5, what="the port taken back")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
            assert page.status == 200 and b"gpuallocd" in page.read()
        assert "the dashboard now served on port" in daemon.stderr()
        assert "Traceback" not in daemon.stderr()
    finally:
        if squat.poll() is None:
            squat.kill()
            squat.communicate(timeout=30)
        daemon.stop()


def test_the_kernel_names_the_owner_of_a_loopback_connection(system_users: SystemUsers) -> None:
    """A connection alice makes from 127.0.0.9 is hers (sock_diag names her uid); one she
    sends a request on and closes before it is accepted is GONE, nobody's to count."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = str(listener.getsockname()[1])
        held = start_as(system_users, "alice", HOLD_ONE, port, "hold")
        try:
            assert held.stdout is not None and held.stdout.readline().strip() == "connected"
            conn, peer = listener.accept()
            with conn:
                assert local_owner(peer, conn.getsockname()) == system_users.uid("alice")
        finally:
            held.kill()
            held.communicate(timeout=30)
        closed = system_users.run("alice", ["-c", HOLD_ONE, port, "close"], timeout=30)
        assert closed.returncode == 0, closed.stderr
        conn, peer = listener.accept()
        with conn:
            assert local_owner(peer, conn.getsockname()) == GONE
