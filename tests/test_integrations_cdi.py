"""CDI specs per lease: shape, validity against the CDI schema, atomic writes, device files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpuallocd.integrations import (
    CDI_KIND,
    CdiError,
    cdi_spec,
    device_files,
    nvidia_device_nodes,
    write_cdi_spec,
)
from gpuallocd.model.lease import Lease, LeasedGpu
from gpuallocd.topology import load_topology
from tests.harness import ThreadDaemon

# The CDI spec's JSON schema (container-device-interface, schema/schema.json and defs.json),
# restated for the fields gpuallocd writes, plus the naming rules of SPEC.md that the
# schema leaves to the Go validator and the rule that loading fails on unknown fields.
_NAME = r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
_KIND = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
_DEVICE_NODE = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "pattern": "^/"},
        "hostPath": {"type": "string"},
        "permissions": {"type": "string"},
        "type": {"type": "string"},
        "major": {"type": "integer"},
        "minor": {"type": "integer"},
        "uid": {"type": "integer", "minimum": 0, "maximum": 4294967295},
        "gid": {"type": "integer", "minimum": 0, "maximum": 4294967295},
    },
    "required": ["path"],
    "additionalProperties": False,
}
_EDITS = {
    "type": "object",
    "properties": {
        "env": {"type": "array", "items": {"type": "string", "pattern": "^[^=]+=.*$"}},
        "deviceNodes": {"type": "array", "items": _DEVICE_NODE},
        "mounts": {"type": "array"},
        "hooks": {"type": "array"},
    },
    "additionalProperties": False,
}
CDI_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "cdiVersion": {"type": "string", "pattern": r"^\d+\.\d+\.\d+$"},
        "kind": {"type": "string", "pattern": _KIND},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "devices": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "pattern": _NAME},
                    "annotations": {"type": "object"},
                    "containerEdits": _EDITS,
                },
                "required": ["name", "containerEdits"],
                "additionalProperties": False,
            },
        },
        "containerEdits": _EDITS,
    },
    "required": ["cdiVersion", "kind", "devices"],
    "additionalProperties": False,
}

NODES = {"GPU-a": "/dev/nvidia0", "GPU-b": "/dev/nvidia1", "GPU-c": "/dev/nvidia3"}


def lease(lease_id: str, *uuids: str) -> Lease:
    gpus = tuple(LeasedGpu(uuid=u, index=i) for i, u in enumerate(uuids))
    return Lease(lease_id, gpus, 1000, "ana", None, None, "simple", 0.0, 3600.0)


def test_the_schema_refuses_what_cdi_refuses() -> None:
    """The test's schema is not vacuous: a device without containerEdits fails it."""
    bad = {"cdiVersion": "0.5.0", "kind": CDI_KIND, "devices": [{"name": "x"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, CDI_SCHEMA)


def test_one_device_per_lease_named_by_its_id() -> None:
    """Each lease is one device of kind gpuallocd.io/lease, with its GPUs' device files."""
    spec = cdi_spec([lease("b2", "GPU-c"), lease("1a", "GPU-a", "GPU-b")], NODES)
    jsonschema.validate(spec, CDI_SCHEMA)
    assert spec["kind"] == "gpuallocd.io/lease"
    assert [d["name"] for d in spec["devices"]] == ["1a", "b2"]
    first = spec["devices"][0]["containerEdits"]
    assert first["deviceNodes"] == [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}]
    assert "NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b" in first["env"]
    assert "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b" in first["env"]
    assert "GPUALLOCD_LEASE_ID=1a" in first["env"]
    assert {"path": "/dev/nvidiactl"} in spec["containerEdits"]["deviceNodes"]


def test_a_gpu_without_a_device_file_is_an_error() -> None:
    """A lease on a GPU with no known device file raises instead of exposing nothing."""
    with pytest.raises(CdiError, match="GPU-z"):
        cdi_spec([lease("1a", "GPU-a", "GPU-z")], NODES)


def test_written_spec_is_valid_json_and_replaces_the_old_one(tmp_path: Path) -> None:
    """write_cdi_spec leaves exactly the new file (no temporary), readable by everyone."""
    target = tmp_path / "gpuallocd.json"
    assert write_cdi_spec(target, [lease("1a", "GPU-a")], NODES)
    assert write_cdi_spec(target, [lease("2b", "GPU-b")], NODES)
    spec = json.loads(target.read_text())
    jsonschema.validate(spec, CDI_SCHEMA)
    assert [d["name"] for d in spec["devices"]] == ["2b"]
    assert os.listdir(tmp_path) == ["gpuallocd.json"]
    assert target.stat().st_mode & 0o777 == 0o644


def test_no_active_lease_removes_the_spec(tmp_path: Path) -> None:
    """With no lease there is no valid spec, so the file goes (and absence is fine)."""
    target = tmp_path / "gpuallocd.json"
    write_cdi_spec(target, [lease("1a", "GPU-a")], NODES)
    assert write_cdi_spec(target, [], NODES) is False
    assert not target.exists()
    assert write_cdi_spec(target, [], NODES) is False


def test_a_failed_write_keeps_the_previous_spec(tmp_path: Path) -> None:
    """An error while building the new spec leaves the old file as it was."""
    target = tmp_path / "gpuallocd.json"
    write_cdi_spec(target, [lease("1a", "GPU-a")], NODES)
    before = target.read_text()
    with pytest.raises(CdiError):
        write_cdi_spec(target, [lease("2b", "GPU-z")], NODES)
    assert target.read_text() == before
    assert os.listdir(tmp_path) == ["gpuallocd.json"]


def test_device_files_come_from_the_nvidia_driver_table(tmp_path: Path) -> None:
    """`Device Minor:` of /proc/driver/nvidia/gpus/*/information names /dev/nvidiaN."""
    gpu_dir = tmp_path / "driver" / "nvidia" / "gpus" / "0000:3b:00.0"
    gpu_dir.mkdir(parents=True)
    (gpu_dir / "information").write_text(
        "Model: \t\t Tesla V100-SXM2-16GB\nIRQ:   \t\t 90\n"
        "GPU UUID: \t GPU-0cabc055-7fa5-5b30-a28c-da88e99eb392\nDevice Minor: \t 5\n"
    )
    known = nvidia_device_nodes(tmp_path)
    assert known == {"GPU-0cabc055-7fa5-5b30-a28c-da88e99eb392": "/dev/nvidia5"}
    files = device_files(load_topology("example:dgx1-volta").gpus, known)
    assert files["GPU-0cabc055-7fa5-5b30-a28c-da88e99eb392"] == "/dev/nvidia5"
    assert files["GPU-618cfbb4-e11e-57d6-a5d5-c345eae2f0c2"] == "/dev/nvidia1"
    assert nvidia_device_nodes(tmp_path / "missing") == {}


def test_spec_of_a_live_daemons_leases_is_valid(daemon: ThreadDaemon, tmp_path: Path) -> None:
    """The client's leases from a real daemon fit write_cdi_spec as the daemon's do."""
    topology = load_topology("example:workstation-4gpu-nvbridge")
    nodes = device_files(topology.gpus, {})
    with daemon.client() as client:
        client.allocate(2)
        client.allocate(1)
        leases = client.leases()
    target = tmp_path / "gpuallocd.json"
    write_cdi_spec(target, leases, nodes)
    spec = json.loads(target.read_text())
    jsonschema.validate(spec, CDI_SCHEMA)
    assert sorted(d["name"] for d in spec["devices"]) == sorted(x.id for x in leases)
