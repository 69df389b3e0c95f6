"""Many clients at once never get the same GPU twice."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable

from gpulease import Client, GpusUnavailable

from tests.harness import ThreadDaemon

CLIENT_SCRIPT = """
import json, sys
from gpulease import Client, GpusUnavailable
granted = []
with Client(sys.argv[1]) as client:
    for _ in range(int(sys.argv[2])):
        try:
            lease = client.allocate(int(sys.argv[3]))
        except GpusUnavailable:
            continue
        granted.append([g.uuid for g in lease.gpus])
        if len(granted) % 2 == 0:
            client.free(lease.id)
print(json.dumps(granted))
"""


def active_uuids(client: Client) -> list[str]:
    return [uuid for lease in client.leases() for uuid in lease.uuids]


def test_threads_racing_for_gpus_never_share_one(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """32 threads race for 8 GPUs; every grant is disjoint from every other active one."""
    daemon = start_daemon(default_policy="simple", inventory="example:dgx1-volta")
    holders: dict[str, str] = {}
    problems: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(32)

    def worker() -> None:
        with daemon.client() as client:
            barrier.wait()
            for _ in range(20):
                try:
                    lease = client.allocate(2)
                except GpusUnavailable:
                    continue
                with lock:
                    for uuid in lease.uuids:
                        if uuid in holders:
                            problems.append(f"{uuid} in {holders[uuid]} and {lease.id}")
                        holders[uuid] = lease.id
                with lock:
                    for uuid in lease.uuids:
                        del holders[uuid]
                client.free(lease.id)

    threads = [threading.Thread(target=worker) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert problems == []
    with daemon.client() as client:
        assert client.leases() == []


def test_processes_racing_for_gpus_never_share_one(daemon: ThreadDaemon) -> None:
    """8 client processes at once: at any time the active leases are disjoint."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLIENT_SCRIPT, str(daemon.paths.socket), "15", "1"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(len(out) for out in outputs) > 0
    with daemon.client() as client:
        held = active_uuids(client)
    assert len(held) == len(set(held)) <= 4
    counts = Counter(held)
    assert all(c == 1 for c in counts.values())


def test_full_node_refuses_more(daemon: ThreadDaemon) -> None:
    """Once every GPU is leased, the next request is gpus_unavailable, not a double booking."""
    with daemon.client() as client:
        client.allocate(4)
        try:
            client.allocate(1)
        except GpusUnavailable as exc:
            assert exc.code == "gpus_unavailable"
        else:
            raise AssertionError("a fifth GPU was granted on a 4-GPU node")
