"""Hostile use of the node's rules, round three: the waiting limit raced, shares that shed
`max_gpus`, and a drain sidestepped through a GPU's MIG instances, by real users against a
real daemon."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.testing import nvml_inventory
from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.rules_harness import daemon_with_config
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

# Sixty waiting requests sent at once from one process: sixty connections opened first, then
# each request written in one go, so the daemon reads them in the same turn of its loop.
PARALLEL_WAITS = """
import json, socket, sys, threading
body = json.dumps({"count": 1, "wait": True, "wait_timeout_seconds": 60}).encode()
head = (
    "POST /v1/leases HTTP/1.1\\r\\nHost: localhost\\r\\nContent-Type: application/json\\r\\n"
    f"Content-Length: {len(body)}\\r\\n\\r\\n"
).encode()
conns = []
for _ in range(60):
    conn = socket.socket(socket.AF_UNIX)
    conn.connect(sys.argv[1])
    conns.append(conn)
for conn in conns:
    conn.sendall(head + body)

def answer(conn):
    text = conn.recv(65536).decode(errors="replace")
    print("quota_exceeded" if "quota_exceeded" in text else text[:40], flush=True)

for conn in conns:
    threading.Thread(target=answer, args=(conn,)).start()
"""

ONE_G = "MIG-9b72e764-9dbf-53bd-85d9-3d1618df8472"


def call(users: SystemUsers, who: str, socket: Path, expression: str) -> dict[str, Any]:
    """Evaluate a client expression (`c` is the Client) as the user; its JSON or its error."""
    done = users.run(who, ["-c", CLIENT_CALL, str(socket), expression])
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def rules(users: SystemUsers) -> str:
    return f"""
default_policy = "simple"
shared_gpus = ["1", "2", "3", "4"]
share_memory_reserve_bytes = 0

[limits]
max_waiting = 1

[limits.user.{users.name("alice")}]
max_gpus = 1

[limits.user.{users.name("bob")}]
max_shares = 2
"""


@pytest.fixture
def node(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> Iterator[tuple[ThreadDaemon, SystemUsers]]:
    """The recorded DGX A100 (GPU 7 in MIG mode, GPUs 1-4 shareable) with the limits above,
    open to the test users."""
    open_to_everyone(short_dir)
    inventory, _ = nvml_inventory("dgx-a100-mig", xid_wait_ms=20)

    def opener(spec: str) -> NvmlInventory:
        return inventory

    daemon = daemon_with_config(
        paths,
        rules(system_users),
        inventory="nvml-recording:dgx-a100-mig",
        inventory_opener=opener,
    ).start()
    yield daemon, system_users
    daemon.stop()
    inventory.close()


def test_sixty_parallel_waits_leave_at_most_max_waiting_in_the_queue(
    node: tuple[ThreadDaemon, SystemUsers], short_dir: Path
) -> None:
    """With every GPU taken, carol (max_waiting = 1) sends 60 waiting requests at once: one
    waits, the other 59 are `quota_exceeded`."""
    daemon, users = node
    socket = daemon.paths.socket
    log = short_dir / "waits.log"
    with daemon.client() as root:
        root.allocate_specific([s.index for s in root.status() if s.state == "free"])
        waits = users.start("carol", ["-c", PARALLEL_WAITS, str(socket)], log)
        try:
            refused = lambda: log.read_text().count("quota_exceeded")  # noqa: E731
            wait_for(lambda: refused() + len(root.queue()) >= 60, 60, what="all 60 answered")
            queued = [w["owner"]["user"] for w in root.queue()]
            assert (len(queued), refused()) == (1, 59)
        finally:
            waits.kill()
            waits.wait(10)


def test_shares_count_as_the_whole_gpus_they_take(node: tuple[ThreadDaemon, SystemUsers]) -> None:
    """alice (max_gpus = 1) may not hold 1-byte shares of four GPUs: each shared GPU is
    lost whole to everyone else. Shares on one GPU count it once; a share of a second GPU is
    refused."""
    daemon, users = node
    socket = daemon.paths.socket
    refused = call(users, "alice", socket, "c.allocate(4, memory_bytes=1)")
    assert refused["code"] == "quota_exceeded"
    assert refused["details"] == {"limit": "max_gpus", "value": 1, "current": 0}
    first = call(users, "alice", socket, "c.allocate(1, memory_bytes=1)")["ok"]
    same = call(users, "alice", socket, "c.allocate(1, memory_bytes=1)")["ok"]
    index = first["gpus"][0]["index"]
    assert same["gpus"][0]["index"] == index
    other = 1 if index != 1 else 2
    second = call(users, "alice", socket, f"c.allocate(1, gpus=[{other}], memory_bytes=1)")
    assert second["code"] == "quota_exceeded"
    assert second["details"] == {"limit": "max_gpus", "value": 1, "current": 1}


def test_a_per_user_cap_on_shares(node: tuple[ThreadDaemon, SystemUsers]) -> None:
    """bob (max_shares = 2) holds two shares; a third, even on a GPU he shares already, is
    refused with the limit named."""
    daemon, users = node
    socket = daemon.paths.socket
    assert "ok" in call(users, "bob", socket, "c.allocate(2, memory_bytes=1)")
    refused = call(users, "bob", socket, "c.allocate(1, memory_bytes=1)")
    assert refused["code"] == "quota_exceeded"
    assert refused["details"] == {"limit": "max_shares", "value": 2, "current": 2}
    done = users.ctl("bob", socket, "limits", "--json")
    shown = {e["limit"]: e for e in json.loads(done.stdout)["limits"]}
    assert (shown["max_shares"]["value"], shown["max_shares"]["current"]) == (2, 2)


def test_a_drained_gpu_in_mig_mode_leases_none_of_its_instances(
    node: tuple[ThreadDaemon, SystemUsers],
) -> None:
    """Root drains GPU 7 (MIG mode): carol gets neither an instance by profile nor one named
    by its UUID; undrained, she gets one."""
    daemon, users = node
    socket = daemon.paths.socket
    with daemon.client() as root:
        root.drain([7], "ECC errors")
    by_profile = call(users, "carol", socket, "c.allocate(mig_profile='1g.10gb')")
    assert by_profile["code"] == "gpus_unavailable", by_profile
    by_name = call(users, "carol", socket, f"c.allocate_specific([{ONE_G!r}])")
    assert by_name["code"] == "gpu_busy", by_name
    with daemon.client() as root:
        assert root.leases() == []
        root.undrain([7])
    assert "ok" in call(users, "carol", socket, "c.allocate(mig_profile='1g.10gb')")
