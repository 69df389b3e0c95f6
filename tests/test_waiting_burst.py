"""A burst of waiting clients: a thousand at once are all queued, none refused for a full
backlog (the daemon listens deep enough, and the client waits out a full one)."""

from __future__ import annotations

import resource
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.harness import ProcessDaemon, wait_for

BURST = 1000
PROCESSES = 4
WAIT_BODY = b'{"gpus": [0], "wait": true}'
WAIT_REQUEST = (
    b"POST /v1/leases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(WAIT_BODY), WAIT_BODY)
)

# One process of the burst: `count` threads, each a client that waits for GPU 0 (held by the
# test); it prints each error, and "released" once every thread has been let go at once.
BURST_SCRIPT = """
import sys, threading
from gpulease import Client, GpuallocError
path, count = sys.argv[1], int(sys.argv[2])
go = threading.Barrier(count + 1)

def wait():
    go.wait()
    try:
        with Client(path) as client:
            client.allocate(gpus=[0], wait=True, timeout=600)
    except GpuallocError as error:
        print("error", error.code, error, flush=True)

threads = [threading.Thread(target=wait, daemon=True) for _ in range(count)]
for thread in threads:
    thread.start()
go.wait()
print("released", flush=True)
for thread in threads:
    thread.join()
"""


@contextmanager
def open_files(wanted: int) -> Iterator[None]:
    """At least `wanted` open files for this process (up to its hard limit) while it runs."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = soft if hard == resource.RLIM_INFINITY else min(hard, max(soft, wanted))
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, limit), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextmanager
def stopped(daemon: ProcessDaemon) -> Iterator[None]:
    """The daemon stopped (SIGSTOP): it accepts nothing until the block ends."""
    daemon.signal(signal.SIGSTOP)
    try:
        yield
    finally:
        daemon.signal(signal.SIGCONT)


def waiting(daemon: ProcessDaemon) -> int:
    """The test user's requests in the queue (`limits` counts them without the queue view)."""
    with daemon.client() as client:
        found = {row["limit"]: row["current"] for row in client.limits()["limits"]}
    return int(found["max_waiting"])


def test_the_backlog_holds_a_burst_the_daemon_has_yet_to_accept(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """A thousand waiting requests connect while the daemon is stopped: the kernel holds
    them all for it (none refused with EAGAIN), and once it runs again all are queued."""
    daemon = process_daemon(max_connections_per_user=BURST + 64)
    refused = 0
    crowd: list[socket.socket] = []
    with daemon.client() as client, open_files(BURST + 256):
        held = client.allocate(gpus=[0])
        try:
            with stopped(daemon):
                for _ in range(BURST):
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    sock.setblocking(False)
                    try:
                        sock.connect(str(daemon.paths.socket))
                    except BlockingIOError:
                        refused += 1
                        sock.close()
                        continue
                    sock.sendall(WAIT_REQUEST)
                    crowd.append(sock)
            assert refused == 0
            wait_for(lambda: waiting(daemon) == BURST, 60, 0.2, "all queued")
            assert [w["position"] for w in client.queue()] == list(range(1, BURST + 1))
        finally:
            for sock in crowd:
                sock.close()
        wait_for(lambda: waiting(daemon) == 0, 60, 0.2, "the crowd gone")
        client.free(held.id)


def test_a_burst_of_a_thousand_waiting_clients_from_four_processes_is_all_queued(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """Four processes let a thousand waiting clients go at once: every one is queued, and
    none meets an error on the way in."""
    daemon = process_daemon(max_connections_per_user=BURST + 64)
    per_process = BURST // PROCESSES
    with daemon.client() as client:
        held = client.allocate(gpus=[0])
        burst = [
            subprocess.Popen(
                [sys.executable, "-c", BURST_SCRIPT, str(daemon.paths.socket), str(per_process)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(PROCESSES)
        ]
        try:
            for process in burst:
                assert process.stdout is not None
                assert process.stdout.readline() == "released\n", process.stderr
            wait_for(lambda: waiting(daemon) == BURST, 120, 0.2, "all queued")
        finally:
            for process in burst:
                process.kill()
        errors = [line for p in burst for line in p.communicate()[0].splitlines()]
        assert errors == []
        wait_for(lambda: waiting(daemon) == 0, 60, 0.2, "the burst gone")
        client.free(held.id)
