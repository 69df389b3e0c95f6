"""Opt-in enforcement of memory shares from NVML's per-process memory, over the fake NVML."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.testing import FakeNvml, nvml_inventory
from tests.harness import ThreadDaemon

GIB = 2**30


@pytest.fixture
def enforcing(
    start_daemon: Callable[..., ThreadDaemon],
) -> Iterator[Callable[[str], tuple[ThreadDaemon, FakeNvml]]]:
    """Start a daemon over the fake NVML, every GPU shared, enforcing in the mode given."""
    inventories: list[NvmlInventory] = []

    def start(mode: str) -> tuple[ThreadDaemon, FakeNvml]:
        inventory, fake = nvml_inventory("dgx-a100-mig", xid_wait_ms=20)
        inventories.append(inventory)
        daemon = start_daemon(
            inventory="nvml-recording:dgx-a100-mig",
            inventory_opener=lambda spec: inventory,
            sample_interval_seconds=0.05,
            shared_gpus=("all",),
            share_enforcement=mode,
        )
        return daemon, fake

    yield start
    for inventory in inventories:
        inventory.close()


@pytest.fixture
def job() -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """A stand-in for a training job: a sleeping child carrying a lease id in its environment."""
    started: list[subprocess.Popen[bytes]] = []

    def start(lease_id: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "GPUALLOCD_LEASE_ID": lease_id}
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)
        started.append(child)
        return child

    yield start
    for child in started:
        if child.poll() is None:
            child.kill()
            child.wait()


def events_of(daemon: ThreadDaemon, lease_id: str, wanted: str) -> list[dict[str, object]]:
    """The lease's history once it has a `wanted` event (the daemon samples on an interval)."""
    deadline = time.monotonic() + 20
    with daemon.client() as client:
        while True:
            events = client.history(lease_id)
            if any(e["event"] == wanted for e in events) or time.monotonic() > deadline:
                return events
            time.sleep(0.05)


def test_a_share_over_its_size_is_warned_and_its_job_killed(
    enforcing: Callable[[str], tuple[ThreadDaemon, FakeNvml]],
    job: Callable[[str], subprocess.Popen[bytes]],
) -> None:
    """With `kill`: a 10 GiB share whose job uses 12 GiB is warned, then its job is killed."""
    daemon, fake = enforcing("kill")
    with daemon.client() as client:
        lease = client.allocate(memory_bytes=10 * GIB)
    child = job(lease.id)
    fake.set_processes(lease.uuids[0], [(child.pid, 12 * GIB)])
    assert child.wait(timeout=30) == -9
    events = [e["event"] for e in events_of(daemon, lease.id, "enforced")]
    assert events[:3] == ["granted", "warned", "enforced"]


def test_warn_only_records_and_leaves_the_job_running(
    enforcing: Callable[[str], tuple[ThreadDaemon, FakeNvml]],
    job: Callable[[str], subprocess.Popen[bytes]],
) -> None:
    """With `warn`: one `warned` event naming the processes and sizes; the job lives on."""
    daemon, fake = enforcing("warn")
    with daemon.client() as client:
        lease = client.allocate(memory_bytes=10 * GIB)
        within = client.allocate(gpus=[lease.gpus[0].index], memory_bytes=10 * GIB)
    child, other = job(lease.id), job(within.id)
    fake.set_processes(lease.uuids[0], [(child.pid, 12 * GIB), (other.pid, 9 * GIB)])
    events_of(daemon, lease.id, "warned")
    later_sample(daemon, fake, lease.uuids[0])  # the same share stays over: no second warning
    with daemon.client() as client:
        warned = [e for e in client.history(lease.id) if e["event"] == "warned"]
        assert [e["event"] for e in client.history(within.id)] == ["granted"]
    assert len(warned) == 1
    assert f"processes {child.pid} use 12.0 GiB of a 10.0 GiB share" in str(warned[0]["detail"])
    assert child.poll() is None and other.poll() is None


def later_sample(daemon: ThreadDaemon, fake: FakeNvml, uuid: str) -> None:
    """Return once the daemon has taken a sample after this call (a marker it must report)."""
    fake.set_utilization(uuid, 42)
    deadline = time.monotonic() + 20
    with daemon.client() as client:
        while time.monotonic() < deadline:
            (status,) = [s.raw for s in client.status() if s.uuid == uuid]
            if status["utilization_percent"] == 42:
                return
            time.sleep(0.05)
    raise AssertionError("no sample within 20 s")
