"""AMD compute partitions as leasable units, against a real daemon over the recorded MI300X
box with its last GPU split into eight CPX partitions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuallocd.inventory.amd.backend import AmdInventory
from gpuallocd.testing import AMD_FORMAT, FakeAmdSmi, load_recording
from tests.harness import ThreadDaemon
from tests.test_amd_inventory import _cpx_on_last_gpu


@pytest.fixture
def cpx_recording(tmp_path: Path) -> Path:
    path = tmp_path / "mi300x-cpx.json"
    path.write_text(json.dumps(_cpx_on_last_gpu(load_recording("amd-mi300x-8gpu", AMD_FORMAT))))
    return path


def test_partitions_know_their_physical_gpu(cpx_recording: Path) -> None:
    """The eight CPX partitions share one `partition_of`; the SPX GPUs have none."""
    fake = FakeAmdSmi(json.loads(cpx_recording.read_text()))
    inventory = AmdInventory(amdsmi=fake)
    try:
        gpus = inventory.topology().gpus
    finally:
        inventory.close()
    parts = [g for g in gpus if g.compute_partition == "CPX"]
    assert {g.partition_of for g in parts} == {parts[0].uuid}
    assert all(g.partition_of is None for g in gpus if g.compute_partition == "SPX")


def test_a_request_for_partitions_takes_them_from_one_gpu_first(
    start_daemon: Callable[..., ThreadDaemon], cpx_recording: Path
) -> None:
    """Two partitions come from one MI300X, each an eighth of it; seven more take the six
    partitions left and one XGMI-linked GPU."""
    daemon = start_daemon(inventory=f"amd-recording:{cpx_recording}")
    with daemon.client() as client:
        pair = client.allocate(2)
        physical = {g.uuid: g.raw["partition_of"] for g in client.status()}
        rest = client.allocate(7)
    parents = {physical[u] for u in pair.uuids}
    assert len(parents) == 1 and None not in parents
    assert [g.fraction for g in pair.gpus] == [0.125, 0.125]
    assert {physical[u] for u in rest.uuids} == parents | {None}  # 6 partitions + one GPU
