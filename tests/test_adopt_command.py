"""`gpuallocctl adopt [PID|GPU]`: a user turns their own running work into a lease; never
someone else's. Real users, real processes, a real daemon."""

from __future__ import annotations

import json

from tests.harness import DaemonPaths, wait_for
from tests.rules_harness import daemon_with_config
from tests.system_users import SystemUsers
from tests.unleased_helpers import Node, node

__all__ = ["node"]

UUID2 = "GPU-bb6adf39-2180-59fa-a20c-689582edf774"
UUID3 = "GPU-f06d330d-af21-5a36-84a7-d3d20d41fb7f"


def test_a_user_adopts_their_process_by_pid_and_by_gpu(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """alice adopts her process on GPU 2 by its pid, and the one on GPU 3 by the GPU; each
    becomes her lease bound to that process."""
    daemon = daemon_with_config(
        paths, "", inventory=node.inventory, sample_interval_seconds=0.1
    ).start()
    on2, on3 = node.start("alice"), node.start("alice")
    node.put(UUID2, on2)
    node.put(UUID3, on3)
    with daemon.client() as client:
        node.sampled(client)
    by_pid = system_users.ctl("alice", paths.socket, "adopt", str(on2))
    assert by_pid.returncode == 0, by_pid.stderr
    assert f": GPU 2 for pid {on2} of {system_users.name('alice')}" in by_pid.stdout
    by_gpu = system_users.ctl("alice", paths.socket, "--json", "adopt", "gpu:3")
    assert by_gpu.returncode == 0, by_gpu.stderr
    (lease,) = json.loads(by_gpu.stdout)["leases"]
    assert (lease["pid"], lease["bound_to_process"], lease["policy"]) == (on3, True, "adopted")
    with daemon.client() as client:
        assert sorted(lease.pid for lease in client.leases()) == sorted([on2, on3])
        assert client.unleased()["processes"] == []  # hers now, at once


def test_nobody_adopts_someone_elses_process(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """bob cannot adopt alice's process (permission denied, nothing changes); with no
    process of his own on a GPU, `adopt` says there is nothing to adopt."""
    daemon = daemon_with_config(
        paths, "", inventory=node.inventory, sample_interval_seconds=0.1
    ).start()
    alices = node.start("alice")
    node.put(UUID2, alices)
    with daemon.client() as client:
        node.sampled(client)
    alice = system_users.name("alice")
    theirs = system_users.ctl("bob", paths.socket, "adopt", f"pid:{alices}")
    assert theirs.returncode == 5, theirs.stderr
    assert f"process {alices} belongs to {alice}, not you; you can adopt only your own" in (
        theirs.stderr
    )
    bare = system_users.ctl("bob", paths.socket, "adopt", str(alices))
    assert bare.returncode == 5 and "unknown_gpu" not in bare.stderr, bare.stderr
    assert f"process {alices} belongs to {alice}; you can adopt only your own" in bare.stderr
    nothing = system_users.ctl("bob", paths.socket, "adopt")
    assert nothing.returncode != 0 and "no process to adopt" in nothing.stderr
    with daemon.client() as client:
        assert client.leases() == []


def test_a_users_own_waiter_does_not_block_their_adopt(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """GPU 2 is held for alice's queued request: bob may not adopt his process there, alice
    may adopt hers (a GPU held for her own waiter is not held against her)."""
    daemon = daemon_with_config(
        paths, "", inventory=node.inventory, sample_interval_seconds=0.1
    ).start()
    alices, bobs = node.start("alice"), node.start("bob")
    node.put(UUID2, alices)
    node.put(UUID2, bobs)
    others = [f"--gpu={index}" for index in (0, 1, 3, 4, 5, 6)]
    held = system_users.ctl("carol", paths.socket, "allocate", *others)
    assert held.returncode == 0, held.stderr
    waiting = system_users.start(
        "alice",
        ["-m", "gpuallocd.cli", "--socket", str(paths.socket), "allocate", "-n", "3", "--wait"],
        paths.root / "waiter.log",
    )
    try:
        with daemon.client() as client:
            wait_for(lambda: len(client.queue()) == 1, timeout=30, what="alice queued")
            node.sampled(client)
        refused = system_users.ctl("bob", paths.socket, "adopt", f"pid:{bobs}")
        assert refused.returncode == 4 and "held for a waiter" in refused.stderr, refused.stderr
        own = system_users.ctl("alice", paths.socket, "adopt", f"pid:{alices}")
        assert own.returncode == 0, own.stderr
        assert f": GPU 2 for pid {alices} of {system_users.name('alice')}" in own.stdout
    finally:
        waiting.kill()
        waiting.wait()
