"""kill -9 of the daemon in the middle of a storm of requests loses nothing acknowledged."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.harness import ProcessDaemon

STORM_CLIENT = """
import random, sys
from gpulease import Client, DaemonUnavailable, GpuallocError
socket, log_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
held = []
with open(log_path, "a", buffering=1) as log, Client(socket, timeout=10) as client:
    while True:
        try:
            if held and rng.random() < 0.5:
                lease_id = held.pop(rng.randrange(len(held)))
                log.write(f"freeing {lease_id}\\n")
                client.free(lease_id)
                log.write(f"freed {lease_id}\\n")
            else:
                lease = client.allocate(rng.randint(1, 2), wait=rng.random() < 0.3, timeout=0.5)
                held.append(lease.id)
                log.write(f"granted {lease.id}\\n")
        except DaemonUnavailable:
            break
        except GpuallocError:
            pass
"""


def read_logs(paths: list[Path]) -> tuple[set[str], set[str], set[str]]:
    """Leases granted, freed, and freed without an answer (the daemon died meanwhile)."""
    events: dict[str, set[str]] = {"granted": set(), "freed": set(), "freeing": set()}
    for path in paths:
        for line in path.read_text().splitlines():
            kind, _, lease_id = line.partition(" ")
            events[kind].add(lease_id)
    in_flight = events["freeing"] - events["freed"]
    return events["granted"], events["freed"], in_flight


def wait_for_grants(paths: list[Path], at_least: int) -> None:
    """Until the clients have been granted `at_least` leases between them: the storm is on,
    however slow the machine (a fixed sleep saw 11 grants on a loaded one)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        granted = sum(path.read_text().count("granted ") for path in paths if path.exists())
        if granted >= at_least:
            return
        time.sleep(0.05)


def test_kill_9_under_load_loses_no_acknowledged_lease(
    short_dir: Path, process_daemon: Callable[..., ProcessDaemon]
) -> None:
    """Six clients allocate and free as fast as they can; the daemon is killed with -9.
    After a restart every acknowledged grant is there, every acknowledged free stays freed,
    and no GPU is in two active leases."""
    daemon = process_daemon(inventory="example:dgx1-volta")
    logs = [short_dir / f"client{i}.log" for i in range(6)]
    clients = [
        subprocess.Popen(
            [sys.executable, "-c", STORM_CLIENT, str(daemon.paths.socket), str(log), str(i)]
        )
        for i, log in enumerate(logs)
    ]
    wait_for_grants(logs, at_least=25)
    daemon.kill()
    for proc in clients:
        proc.wait(60)
    granted, freed, free_unanswered = read_logs(logs)
    assert len(granted) > 20, "the storm did not get going"

    restarted = process_daemon(inventory="example:dgx1-volta")
    with restarted.client() as client:
        active = {lease.id: lease for lease in client.leases()}
        for lease_id in granted - free_unanswered:
            state = client.lease(lease_id).state
            assert state == ("freed" if lease_id in freed else "active"), lease_id
        # A free committed while its answer was on the way is freed; else it is still active.
        for lease_id in free_unanswered:
            assert client.lease(lease_id).state in ("freed", "active"), lease_id
    held = [uuid for lease in active.values() for uuid in lease.uuids]
    assert len(held) == len(set(held))
    # A grant committed while its answer was on the way is the only unacknowledged lease a
    # client can have: at most one per client.
    assert len(set(active) - granted) <= len(clients)
