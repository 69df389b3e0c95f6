"""The daemon's CDI spec, kept equal to its active leases (setting `cdi_spec_path`).

An observer of the allocator: told of every grant and every end once the ledger commit that
recorded it has returned, it rewrites the spec (atomically) with every active lease, once
per commit that changed it (a group commit may hold dozens of transitions), so
`podman run --device gpuallocd.io/lease=LEASE_ID` (or Docker 25 and later with CDI) gets
exactly the GPUs of that lease. A lease of MIG instances or memory shares names its physical
GPUs' device files. A spec that cannot be written is logged; it never fails a request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from gpuallocd.integrations.cdi import CdiError, write_cdi_spec
from gpuallocd.integrations.devices import device_files, nvidia_device_nodes
from gpuallocd.model import Gpu, Lease

__all__ = ["CdiSpecWriter"]

log = logging.getLogger(__name__)


class _PhysicalGpu:
    def __init__(self, uuid: str) -> None:
        self.uuid = uuid


class _LeaseOfGpus:
    """A lease as the spec sees it: its physical GPUs, each once."""

    def __init__(self, lease: Lease) -> None:
        self.id = lease.id
        uuids = dict.fromkeys(unit.gpu_uuid for unit in lease.gpus)
        self.gpus = [_PhysicalGpu(uuid) for uuid in uuids]


class CdiSpecWriter:
    """Rewrites the spec at `path` after each commit that granted or ended a lease."""

    def __init__(
        self,
        path: str | Path,
        gpus: Iterable[Gpu],
        active: Iterable[Lease] = (),
        nodes: Mapping[str, str] | None = None,
    ) -> None:
        """`nodes` maps GPU UUIDs to device files: by default the NVIDIA driver's table,
        else `/dev/nvidiaINDEX`."""
        self._path = Path(path)
        known = nvidia_device_nodes() if nodes is None else nodes
        self._nodes = device_files(gpus, known)
        self._active = {lease.id: _LeaseOfGpus(lease) for lease in active}
        self._changed = False
        self._write()

    def lease_granted(self, lease: Lease) -> None:
        self._active[lease.id] = _LeaseOfGpus(lease)
        self._changed = True

    def lease_ended(self, lease: Lease) -> None:
        if self._active.pop(lease.id, None) is not None:
            self._changed = True

    def commit_published(self) -> None:
        if self._changed:
            self._changed = False
            self._write()

    def allocation_finished(self, seconds: float, *, waited: bool, outcome: str) -> None:
        return None

    def _write(self) -> None:
        try:
            write_cdi_spec(self._path, list(self._active.values()), self._nodes)
        except (CdiError, OSError) as exc:
            log.error("could not write the CDI spec %s: %s", self._path, exc)
