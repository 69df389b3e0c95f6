"""The whole daemon over the fake NVML: topology, foreign use, Xid health, lost GPUs, rescan."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from gpulease import Client, GpuBusy, PermissionDenied

from gpuallocd.cli import cli
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.testing import FakeNvml, nvml_inventory
from gpuallocd.topology import topology_to_json
from tests.harness import ProcessDaemon, ThreadDaemon

SAMPLE_SECONDS = 0.05


@pytest.fixture
def dgx(
    start_daemon: Callable[..., ThreadDaemon],
) -> Iterator[tuple[ThreadDaemon, FakeNvml]]:
    """A daemon serving the recorded DGX A100, with the fake at hand to change the machine."""
    inventory, fake = nvml_inventory("dgx-a100-mig", xid_wait_ms=20)
    opened: list[str] = []

    def open_recorded(spec: str) -> NvmlInventory:
        opened.append(spec)
        return inventory

    daemon = start_daemon(
        inventory="nvml-recording:dgx-a100-mig",
        inventory_opener=open_recorded,
        sample_interval_seconds=SAMPLE_SECONDS,
    )
    assert opened == ["nvml-recording:dgx-a100-mig"]
    yield daemon, fake
    inventory.close()


Gpus = list[dict[str, Any]]


def gpus_when(client: Client, check: Callable[[Gpus], bool]) -> Gpus:
    """The daemon's GPU list once `check` holds (the daemon samples on an interval)."""
    deadline = time.monotonic() + 10
    while True:
        gpus = [g.raw for g in client.status()]
        if check(gpus) or time.monotonic() > deadline:
            return gpus
        time.sleep(SAMPLE_SECONDS)


def test_daemon_serves_the_discovered_topology(dgx: tuple[ThreadDaemon, FakeNvml]) -> None:
    """GET /v1/topology is the discovered node; `gpuallocctl topology` prints it as NV12s."""
    daemon, fake = dgx
    with daemon.client() as client:
        document = client.topology()
    assert [g["uuid"] for g in document["gpus"]] == fake.uuids()
    assert all(link["nvlinks"] == 12 and link["nvswitch"] for link in document["links"])
    result = CliRunner().invoke(cli, ["--socket", str(daemon.paths.socket), "topology"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].split("\t")[1:4] == [" X ", "NV12", "NV12"]


def test_foreign_use_is_reported_and_avoided(dgx: tuple[ThreadDaemon, FakeNvml]) -> None:
    """A process of someone without a lease makes its GPU `in-use`; allocation avoids it."""
    daemon, fake = dgx
    busy = fake.uuids()[2]
    fake.set_processes(busy, [(os.getpid(), 2**30)])
    with daemon.client() as client:
        gpus = gpus_when(client, lambda gs: gs[2]["state"] == "in-use")
        assert gpus[2]["foreign_pids"] == [os.getpid()]
        lease = client.allocate(5)
        assert busy not in {g.uuid for g in lease.gpus}


def test_holders_own_processes_are_not_foreign(dgx: tuple[ThreadDaemon, FakeNvml]) -> None:
    """The lease holder's processes on its GPU are its own use, not foreign use."""
    daemon, fake = dgx
    with daemon.client() as client:
        lease = client.allocate(gpus=[3])
        fake.set_processes(fake.uuids()[3], [(os.getpid(), 2**30)])
        fake.set_memory_used(fake.uuids()[3], 3 * 2**30)  # read in the same sample
        gpus = gpus_when(client, lambda gs: gs[3]["memory_used_bytes"] == 3 * 2**30)
        assert (gpus[3]["state"], gpus[3]["foreign_pids"]) == ("leased", [])
        assert gpus[3]["lease_id"] == lease.id


def test_critical_xid_takes_a_gpu_out_and_holders_see_why(
    dgx: tuple[ThreadDaemon, FakeNvml],
) -> None:
    """Xid 79 makes the GPU unhealthy: no new lease gets it, its holder sees the reason."""
    daemon, fake = dgx
    with daemon.client() as client:
        held = client.allocate(gpus=[6])
        fake.inject_xid(fake.uuids()[5], 79)
        fake.inject_xid(fake.uuids()[6], 79)
        gpus = gpus_when(client, lambda gs: not gs[5]["healthy"] and not gs[6]["healthy"])
        assert gpus[5]["state"] == "unhealthy"
        assert "Xid 79 (GPU has fallen off the bus)" in gpus[5]["health_reason"]
        assert gpus[6]["lease_id"] == held.id and not gpus[6]["healthy"]
        with pytest.raises(GpuBusy):
            client.allocate(gpus=[5])


def test_lost_gpu_never_stops_the_others(dgx: tuple[ThreadDaemon, FakeNvml]) -> None:
    """A GPU falling off the bus is unhealthy; the daemon keeps leasing the rest."""
    daemon, fake = dgx
    fake.lose_gpu(fake.uuids()[1])
    with daemon.client() as client:
        gpus = gpus_when(client, lambda gs: not gs[1]["healthy"])
        assert "fallen off the bus" in gpus[1]["health_reason"]
        lease = client.allocate(5)  # 8 less the lost GPU, GPU 0 (in use), GPU 7 (MIG mode)
        assert fake.uuids()[1] not in {g.uuid for g in lease.gpus}
        fake.restore_gpu(fake.uuids()[1])
        assert gpus_when(client, lambda gs: gs[1]["healthy"])[1]["healthy"]


def test_rescan_is_for_root_and_clears_xid_marks(dgx: tuple[ThreadDaemon, FakeNvml]) -> None:
    """As root, rescan rediscovers and the reset GPU serves again; others may not rescan."""
    daemon, fake = dgx
    fake.inject_xid(fake.uuids()[4], 48)
    runner = CliRunner()
    with daemon.client() as client:
        gpus_when(client, lambda gs: not gs[4]["healthy"])
        if os.getuid() != 0:
            with pytest.raises(PermissionDenied):
                client.rescan()
            return
        result = runner.invoke(cli, ["--socket", str(daemon.paths.socket), "rescan"])
        assert result.exit_code == 0, result.output
        assert result.output.startswith("rescanned: 8 GPUs")
        assert gpus_when(client, lambda gs: gs[4]["healthy"])[4]["healthy"]


def test_daemon_process_accepts_a_recording_spec(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """`gpuallocd --inventory nvml-recording:NAME` serves the recorded machine."""
    daemon = process_daemon(inventory="nvml-recording:dgx1-volta")
    expected, _ = nvml_inventory("dgx1-volta")
    try:
        with daemon.client() as client:
            assert client.topology() == topology_to_json(expected.topology())
    finally:
        expected.close()
        daemon.stop()
