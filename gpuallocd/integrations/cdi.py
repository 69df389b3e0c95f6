"""A CDI spec with one device per lease, for Podman and Docker (25 and later).

Container runtimes that speak the Container Device Interface read specs from `/etc/cdi` and
`/var/run/cdi` and resolve `--device gpuallocd.io/lease=LEASE_ID` to the edits of that device:
the device files of the lease's GPUs and `NVIDIA_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES`
naming them by UUID. The control files every CUDA process needs (`/dev/nvidiactl`,
`/dev/nvidia-uvm`, ...) are edits of the whole spec, applied when any lease is requested.

How it is meant to be called: the daemon, after each commit that grants or ends a lease,
calls `write_cdi_spec(path, active_leases)` with every active lease (not just the one
that changed), so the file always names exactly the active leases. The write is atomic (a
temporary file in the same directory, then a rename): a runtime reading the spec sees the
old or the new file, never half of one. With no active lease the file is removed, since a
CDI spec must describe at least one device. The spec is JSON, which is also valid YAML, so
the file may be named `gpuallocd.json` or `gpuallocd.yaml`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from gpulease.lease_id import LEASE_ID_VARIABLE

from gpuallocd.host.files import write_file
from gpuallocd.integrations.devices import NVIDIA_CONTROL_NODES, nvidia_device_nodes

__all__ = ["CDI_KIND", "CDI_VERSION", "CdiError", "LeaseLike", "cdi_spec", "write_cdi_spec"]

CDI_KIND = "gpuallocd.io/lease"
CDI_VERSION = "0.5.0"  # the first version that allows device names to begin with a digit


class GpuLike(Protocol):
    @property
    def uuid(self) -> str: ...


class LeaseLike(Protocol):
    """What the spec needs of a lease: the daemon's and the client's leases both fit."""

    @property
    def id(self) -> str: ...

    @property
    def gpus(self) -> Sequence[GpuLike]: ...


class CdiError(ValueError):
    """A lease names a GPU whose device file is not known; no spec was written."""


def _device(lease: LeaseLike, nodes: Mapping[str, str]) -> dict[str, Any]:
    uuids = [g.uuid for g in lease.gpus]
    missing = [u for u in uuids if u not in nodes]
    if missing:
        raise CdiError(f"lease {lease.id}: no device file known for {', '.join(missing)}")
    visible = ",".join(uuids)
    return {
        "name": lease.id,
        "containerEdits": {
            "env": [
                f"NVIDIA_VISIBLE_DEVICES={visible}",
                f"CUDA_VISIBLE_DEVICES={visible}",
                f"{LEASE_ID_VARIABLE}={lease.id}",
            ],
            "deviceNodes": [{"path": nodes[u]} for u in uuids],
        },
    }


def cdi_spec(
    leases: Iterable[LeaseLike],
    nodes: Mapping[str, str],
    control_nodes: Sequence[str] = NVIDIA_CONTROL_NODES,
) -> dict[str, Any]:
    """The spec document: one device per lease, named by the lease id.

    `nodes` maps each GPU's UUID to its device file (`nvidia_device_nodes()` on a real node).
    Raises CdiError when a lease has a GPU missing from `nodes`, or when there is no lease.
    """
    devices = [_device(lease, nodes) for lease in sorted(leases, key=lambda x: x.id)]
    if not devices:
        raise CdiError("a CDI spec needs at least one device; there is no active lease")
    spec: dict[str, Any] = {"cdiVersion": CDI_VERSION, "kind": CDI_KIND, "devices": devices}
    if control_nodes:
        spec["containerEdits"] = {"deviceNodes": [{"path": p} for p in control_nodes]}
    return spec


def write_cdi_spec(
    path: str | os.PathLike[str],
    leases: Iterable[LeaseLike],
    nodes: Mapping[str, str] | None = None,
    control_nodes: Sequence[str] = NVIDIA_CONTROL_NODES,
) -> bool:
    """Write the spec of `leases` (all active leases) to `path` atomically.

    `nodes` maps GPU UUIDs to device files; by default the NVIDIA driver's table is read.

    Returns True when a spec was written, False when there was no lease and the file was
    removed (or was already absent). Raises CdiError (nothing written) as `cdi_spec` does,
    and OSError when the directory is not writable.
    """
    target = Path(path)
    leases = list(leases)
    if not leases:
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
        return False
    spec = cdi_spec(leases, nvidia_device_nodes() if nodes is None else nodes, control_nodes)
    text = json.dumps(spec, indent=2, sort_keys=True) + "\n"
    write_file(target, text.encode(), 0o644, durable=True)  # the runtime reads it as itself
    return True
