"""The daemon keeps a CDI spec equal to its active leases (`cdi_spec_path`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jsonschema

from gpuallocd.integrations.cdi_writer import CdiSpecWriter
from gpuallocd.model import Lease, LeasedGpu
from gpuallocd.topology import load_topology
from tests.harness import ThreadDaemon, wait_for
from tests.test_integrations_cdi import CDI_SCHEMA


def _devices(path: Path) -> dict[str, list[str]]:
    spec = json.loads(path.read_text())
    jsonschema.validate(spec, CDI_SCHEMA)
    return {
        device["name"]: [node["path"] for node in device["containerEdits"]["deviceNodes"]]
        for device in spec["devices"]
    }


def test_the_spec_follows_grants_and_frees(
    start_daemon: Callable[..., ThreadDaemon], tmp_path: Path
) -> None:
    """Each grant adds a device named by the lease id with its GPUs' device files; the last
    free removes the file (a CDI spec must describe a device)."""
    spec = tmp_path / "cdi" / "gpuallocd.json"
    spec.parent.mkdir()
    daemon = start_daemon(default_policy="simple", cdi_spec_path=str(spec))
    with daemon.client() as client:
        first = client.allocate(2)
        second = client.allocate(1)
        devices = _devices(spec)
        assert set(devices) == {first.id, second.id}
        assert devices[first.id] == [f"/dev/nvidia{g.index}" for g in first.gpus]
        client.free(first.id)
        assert set(_devices(spec)) == {second.id}
        client.free(second.id)
        wait_for(lambda: not spec.exists(), timeout=10)


def test_the_spec_names_the_leases_a_restarted_daemon_finds(
    start_daemon: Callable[..., ThreadDaemon], tmp_path: Path
) -> None:
    """At start the spec is written from the ledger's active leases."""
    spec = tmp_path / "gpuallocd.json"
    daemon = start_daemon(default_policy="simple")
    with daemon.client() as client:
        kept = client.allocate(1, ttl=3600)
    daemon.stop()
    start_daemon(default_policy="simple", cdi_spec_path=str(spec))
    assert set(_devices(spec)) == {kept.id}


def test_the_spec_is_written_once_per_commit_with_every_lease_of_it(tmp_path: Path) -> None:
    """The writer is told each transition of a commit and writes when the commit is
    published: a group commit of many grants is one rewrite, naming them all."""
    topology = load_topology("example:workstation-4gpu-nvbridge")
    spec = tmp_path / "gpuallocd.json"
    writer = CdiSpecWriter(spec, topology.gpus, nodes={})
    leases = [_lease(f"lease-{i}", gpu.uuid, i) for i, gpu in enumerate(topology.gpus[:3])]
    for lease in leases:
        writer.lease_granted(lease)
    assert not spec.exists()  # nothing published yet
    writer.commit_published()
    assert set(_devices(spec)) == {lease.id for lease in leases}
    writer.lease_ended(leases[0])
    assert set(_devices(spec)) == {lease.id for lease in leases}
    writer.commit_published()
    assert set(_devices(spec)) == {lease.id for lease in leases[1:]}


def _lease(lease_id: str, uuid: str, index: int) -> Lease:
    return Lease(
        id=lease_id,
        gpus=(LeasedGpu(uuid, index),),
        owner_uid=1000,
        owner_name="ana",
        pid=None,
        label=None,
        policy="simple",
        created_at=0.0,
        expires_at=60.0,
    )
