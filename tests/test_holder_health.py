"""Holder-aware health: an Xid on a leased GPU is told to its holder (a lease history event,
a line from `gpuallocctl run`, `gpu_lease`'s callback or exception), and the GPU is granted
to nobody until root clears it (`rescan`). The recorded NVML machine delivers the Xid."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest
from gpulease import GpuBusy, GpuUnhealthy, gpu_lease

from gpuallocd.cli.leasing.revoke_watch import descendants
from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.rules_harness import daemon_with_config
from tests.system_users import SystemUsers
from tests.unleased_helpers import Node, node

__all__ = ["node"]

UUID3 = "GPU-f06d330d-af21-5a36-84a7-d3d20d41fb7f"


def start(paths: DaemonPaths, node: Node) -> ThreadDaemon:
    return daemon_with_config(
        paths, "", inventory=node.inventory, sample_interval_seconds=0.1
    ).start()


def xid(node: Node, uuid: str, seq: int = 1) -> None:
    """Xid 79 (fallen off the bus) on `uuid`, event number `seq` (each is delivered once)."""
    content = json.loads(node.live.read_text())
    content["xid"] = [{"seq": seq, "uuid": uuid, "xid": 79}]
    node.live.write_text(json.dumps(content))


def test_run_hears_an_xid_and_the_gpu_waits_for_root(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """Xid 79 on alice's GPU 3: an `unhealthy` event in her lease, a line from her `run`;
    after her lease ends GPU 3 is refused to everyone until root's rescan."""
    daemon = start(paths, node)
    log = paths.root / "run.log"
    argv = ["-m", "gpuallocd.cli", "--socket", str(paths.socket), "run", "--gpu", "3", "--"]
    sleeper = [system_users.python, "-c", "import time; time.sleep(600)"]
    wrapper = system_users.start("alice", [*argv, *sleeper], log)
    try:
        with daemon.client() as client:
            wait_for(lambda: len(client.leases()) == 1, timeout=30, what="alice's lease")
            (lease,) = client.leases()
        xid(node, UUID3)
        wait_for(lambda: "unhealthy: GPU 3 is unhealthy: Xid 79" in log.read_text(), 30)
        with daemon.client() as client:
            events = [e["event"] for e in client.history(lease.id)]
            assert events.count("unhealthy") == 1
    finally:
        for child in descendants(wrapper.pid):
            os.kill(child, signal.SIGKILL)
        wrapper.kill()
        wrapper.wait(10)
    with daemon.client() as client:
        wait_for(lambda: client.leases() == [], timeout=30, what="the lease to end")
        node.clear()  # the Xid is not repeated: its mark stays
        node.sampled(client)
        with pytest.raises(GpuBusy):
            client.allocate(gpus=[3])
        client.rescan()  # root clears it
        node.sampled(client)
        assert client.allocate(gpus=[3]).uuids == (UUID3,)


def test_gpu_lease_calls_back_or_raises(paths: DaemonPaths, node: Node) -> None:
    """`gpu_lease(on_unhealthy=...)` gets the failing GPU at its next renewal; with "raise",
    GpuUnhealthy interrupts the body."""
    start(paths, node)
    heard: list[list[dict[str, Any]]] = []
    with gpu_lease(gpus=[3], ttl=3, socket=paths.socket, on_unhealthy=lambda _, g: heard.append(g)):
        xid(node, UUID3)
        wait_for(lambda: bool(heard), timeout=30, what="the callback")
    assert heard[0][0]["index"] == 3 and "Xid 79" in heard[0][0]["reason"]
    with (
        pytest.raises(GpuUnhealthy),
        gpu_lease(gpus=[4], ttl=3, socket=paths.socket, on_unhealthy="raise"),
    ):
        xid(node, "GPU-9a5b1fed-d2bc-5d5a-9428-e7d5f2985f67", seq=2)
        wait_for(lambda: False, timeout=30, what="GpuUnhealthy")
