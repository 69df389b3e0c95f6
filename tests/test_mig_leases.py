"""MIG instances as leases, over the recorded DGX A100 whose GPU 7 is in MIG mode
(a 3g.40gb, a 2g.20gb and two 1g.10gb instances), against a real daemon."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from gpulease import Client, GpuBusy, GpusUnavailable, InvalidRequest, Lease, gpu_lease

from gpuallocd.cli import cli
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.testing import FakeNvml, nvml_inventory
from tests.harness import ThreadDaemon, ctl_argv, wait_for

ONE_G = {"MIG-9b72e764-9dbf-53bd-85d9-3d1618df8472", "MIG-11289fca-215a-562f-be60-457efe6f3907"}
THREE_G = "MIG-9aaf1f46-ef8b-5527-b7bb-e6ccd72621c1"
GPU7 = "GPU-495f5088-1f28-519e-b665-7c23402fd3b3"


@pytest.fixture
def mig_node(start_daemon: Callable[..., ThreadDaemon]) -> Iterator[tuple[ThreadDaemon, FakeNvml]]:
    """A daemon on the recorded DGX A100 with MIG on GPU 7, and the fake behind it."""
    inventory, fake = nvml_inventory("dgx-a100-mig", xid_wait_ms=20)

    def opener(spec: str) -> NvmlInventory:
        return inventory

    daemon = start_daemon(
        inventory="nvml-recording:dgx-a100-mig",
        inventory_opener=opener,
        sample_interval_seconds=0.05,
    )
    yield daemon, fake
    inventory.close()


def test_two_1g_instances_are_leased_then_a_third_is_refused(
    mig_node: tuple[ThreadDaemon, FakeNvml],
) -> None:
    """gpu_lease(mig=) exports a MIG UUID; the second gets the other one; the third is refused."""
    daemon, _ = mig_node
    with gpu_lease(mig="1g.10gb", socket=daemon.paths.socket) as first:
        visible = os.environ["CUDA_VISIBLE_DEVICES"]
        assert visible in ONE_G and first.gpus[0].kind == "mig"
        assert first.gpus[0].parent_uuid == GPU7 and first.gpus[0].index == 7
        with daemon.client() as client:
            second = client.allocate(mig_profile="1g.10gb")
            assert {visible, second.uuids[0]} == ONE_G
            with pytest.raises(GpusUnavailable, match=r"1 1g.10gb instance\(s\) asked for, 0 free"):
                client.allocate(mig_profile="1g.10gb")
            client.free(second.id)


def test_gpuallocctl_run_gives_the_command_a_mig_uuid(
    mig_node: tuple[ThreadDaemon, FakeNvml],
) -> None:
    """`gpuallocctl run --mig 1g.10gb` runs the command with a 1g.10gb MIG UUID visible."""
    daemon, _ = mig_node
    script = "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"
    result = subprocess.run(
        ctl_argv(
            daemon.paths.socket, "run", "--mig", "1g.10gb", "--", sys.executable, "-c", script
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() in ONE_G
    with daemon.client() as client:
        assert client.leases() == []  # freed when the command exited


def test_a_waiting_instance_request_gets_the_first_one_freed(
    mig_node: tuple[ThreadDaemon, FakeNvml],
) -> None:
    """With both 1g.10gb instances leased, a waiting request is granted the one freed."""
    daemon, _ = mig_node
    granted: list[Lease] = []
    with daemon.client() as client:
        leases = [client.allocate(mig_profile="1g.10gb") for _ in range(2)]

        def wait_for_one() -> None:
            with daemon.client() as waiter:
                granted.append(waiter.allocate(mig_profile="1g.10gb", wait=True, timeout=60))

        thread = threading.Thread(target=wait_for_one)
        thread.start()
        wait_for(lambda: len(client.queue()) == 1, timeout=20)
        client.free(leases[1].id)
        thread.join(60)
    assert [lease.uuids for lease in granted] == [leases[1].uuids]


def test_an_instance_is_leased_by_its_uuid_and_not_twice(
    mig_node: tuple[ThreadDaemon, FakeNvml],
) -> None:
    """--gpu MIG-... leases that instance; asking for it again is gpu_busy."""
    daemon, _ = mig_node
    runner = CliRunner()
    base = ["--socket", str(daemon.paths.socket), "--json"]
    result = runner.invoke(cli, [*base, "allocate", "--gpu", THREE_G])
    assert result.exit_code == 0, result.output
    assert '"mig_profile": "3g.40gb"' in result.output
    with daemon.client() as client, pytest.raises(GpuBusy, match="is leased"):
        client.allocate(gpus=[THREE_G])


def test_a_gpu_in_mig_mode_is_never_leased_whole(mig_node: tuple[ThreadDaemon, FakeNvml]) -> None:
    """GPU 7 by index or UUID is refused with a hint; a count never picks it."""
    daemon, _ = mig_node
    with daemon.client() as client:
        for ref in (7, GPU7):
            with pytest.raises(InvalidRequest, match="GPU 7 is in MIG mode"):
                client.allocate(gpus=[ref])
        lease = client.allocate(6)  # GPUs 1-6: GPU 0 runs someone's process, GPU 7 is MIG
        assert GPU7 not in lease.uuids


def test_unknown_profile_and_too_many_instances_are_explained(
    mig_node: tuple[ThreadDaemon, FakeNvml],
) -> None:
    """A profile the node lacks names the ones it has; more instances than exist is refused."""
    daemon, _ = mig_node
    with daemon.client() as client:
        with pytest.raises(InvalidRequest, match=r"profiles: 1g.10gb, 2g.20gb, 3g.40gb"):
            client.allocate(mig_profile="7g.80gb")
        with pytest.raises(InvalidRequest, match="the node has 2"):
            client.allocate(3, mig_profile="1g.10gb")


def test_status_lists_instances_under_their_gpu(mig_node: tuple[ThreadDaemon, FakeNvml]) -> None:
    """GPU 7 is `mig`, with its four instances and who holds each; the table shows them,
    a leased one with its holder and label."""
    daemon, _ = mig_node
    with daemon.client() as client:
        lease = client.allocate(mig_profile="2g.20gb", label="mig-job")
        gpu7: dict[str, Any] = client.status()[7].raw
    assert gpu7["state"] == "mig"
    profiles = sorted(i["mig_profile"] for i in gpu7["instances"])
    assert profiles == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    held = [i for i in gpu7["instances"] if i["lease_id"] == lease.id]
    assert [i["mig_profile"] for i in held] == ["2g.20gb"]
    table = CliRunner().invoke(cli, ["--socket", str(daemon.paths.socket), "status"]).output
    assert table.count("7/mig") == 4 and "root (mig-job)" in table  # the label, as a GPU's row


def test_rescan_ends_the_lease_of_a_vanished_instance(
    mig_node: tuple[ThreadDaemon, FakeNvml],
) -> None:
    """An admin destroys a leased instance; after rescan its lease is revoked with the reason."""
    daemon, fake = mig_node
    if os.getuid() != 0:
        pytest.skip("rescan is for root")
    with daemon.client() as client:
        lease = client.allocate(gpus=[THREE_G])
        fake.destroy_mig_device(THREE_G)
        client.rescan()
        assert client.lease(lease.id).state == "revoked"
        events = client.history(lease.id)
        assert f"MIG instance {THREE_G} vanished on rescan" in events[-1]["detail"]
        with pytest.raises(InvalidRequest, match=r"profiles: 1g\.10gb, 2g\.20gb\)"):
            client.allocate(mig_profile="3g.40gb")


def test_instances_on_one_client_are_json_compatible(
    mig_node: tuple[ThreadDaemon, FakeNvml],
) -> None:
    """A lease of an instance still has `index` and `uuid` per unit, plus its kind and parent."""
    daemon, _ = mig_node
    with Client(daemon.paths.socket) as client:
        raw = client.allocate(mig_profile="1g.10gb").raw
    unit = raw["gpus"][0]
    assert unit["index"] == 7 and unit["uuid"] in ONE_G
    assert unit["kind"] == "mig" and unit["parent_uuid"] == GPU7
    assert 0.1 < unit["fraction"] < 0.13  # 9.5 GiB of 80 GiB
