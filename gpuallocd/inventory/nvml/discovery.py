"""Discovery: what the node's GPUs are and how they are joined, read once from NVML.

Runs at start and on rescan, never per request. A GPU that cannot be read is left out with
a problem line for the operator; on rescan a GPU known before that cannot be read now is
kept (with its old links) and reported lost, so that its lease holders still see it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuallocd.errors import NvmlError
from gpuallocd.inventory.nvml.api import NvmlApi, optional
from gpuallocd.inventory.nvml.links import NvLinkEnd, build_links, pcie_level, read_nvlinks
from gpuallocd.model import Gpu, Link, MigDevice, PcieLevel, Topology, pair_key

__all__ = ["Discovery", "discover", "format_cpus"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Discovery:
    """The topology, a device handle per readable GPU, and what could not be read."""

    topology: Topology
    handles: Mapping[str, object] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    lost: Mapping[str, str] = field(default_factory=dict)  # uuid -> why it is unreadable


def format_cpus(cpus: Iterable[int]) -> str:
    """A Linux cpulist such as `0-19,40-59`."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in ranges)


def _mig_profile(name: str | None) -> str | None:
    """`3g.40gb` from `NVIDIA A100-SXM4-80GB MIG 3g.40gb`."""
    if not name or " MIG " not in name:
        return None
    return name.rsplit(" MIG ", 1)[1].strip() or None


def _mig_device(api: NvmlApi, mig: object) -> MigDevice:
    memory = optional(api.memory, mig)
    return MigDevice(
        uuid=api.uuid(mig),
        gpu_instance_id=optional(api.gpu_instance_id, mig),
        compute_instance_id=optional(api.compute_instance_id, mig),
        profile=_mig_profile(optional(api.name, mig)),
        memory_total_bytes=None if memory is None else memory.total_bytes,
    )


def read_mig(api: NvmlApi, handle: object) -> tuple[bool, tuple[MigDevice, ...]]:
    """Whether MIG is enabled now, and its instances."""
    mode = optional(api.mig_mode, handle)
    if mode is None or not mode[0]:
        return False, ()
    devices = []
    for slot in range(optional(api.mig_slots, handle) or 0):
        mig = optional(api.mig_handle, handle, slot)
        if mig is not None:
            devices.append(_mig_device(api, mig))
    return True, tuple(devices)


def _numa_node(api: NvmlApi, handle: object) -> int | None:
    nodes = optional(api.numa_nodes, handle)
    return nodes[0] if nodes and len(nodes) == 1 else None


def read_gpu(api: NvmlApi, index: int, handle: object) -> Gpu:
    """One GPU's identity and placement."""
    memory = optional(api.memory, handle)
    cpus = optional(api.cpus, handle)
    capability = optional(api.compute_capability, handle)
    mig_mode, mig_devices = read_mig(api, handle)
    return Gpu(
        uuid=api.uuid(handle),
        index=index,
        name=api.name(handle),
        pci_bus_id=optional(api.pci_bus_id, handle),
        memory_total_bytes=None if memory is None else memory.total_bytes,
        numa_node=_numa_node(api, handle),
        cpu_affinity=format_cpus(cpus) if cpus else None,
        compute_capability=None if capability is None else f"{capability[0]}.{capability[1]}",
        mig_mode=mig_mode,
        mig_devices=mig_devices,
    )


def _pcie_level(api: NvmlApi, a: object, b: object) -> PcieLevel | None:
    try:
        return pcie_level(optional(api.common_ancestor, a, b))
    except NvmlError as exc:  # one of the two was lost since it was read
        log.warning("cannot read the PCIe path between two GPUs: %s", exc)
        return None


def _pcie_levels(
    api: NvmlApi, found: list[tuple[Gpu, object]]
) -> dict[tuple[str, str], PcieLevel | None]:
    return {
        pair_key(a.uuid, b.uuid): _pcie_level(api, handle_a, handle_b)
        for i, (a, handle_a) in enumerate(found)
        for b, handle_b in found[i + 1 :]
    }


def _read_all(api: NvmlApi) -> tuple[list[tuple[Gpu, object]], dict[int, str]]:
    """The GPUs that could be read, and a reason per index that could not."""
    found, failed = [], {}
    for index in range(api.device_count()):
        try:
            handle = api.handle(index)
            found.append((read_gpu(api, index, handle), handle))
        except NvmlError as exc:
            failed[index] = exc.message
    return found, failed


def _nvlinks(api: NvmlApi, found: list[tuple[Gpu, object]]) -> dict[str, tuple[NvLinkEnd, ...]]:
    ends = {}
    for gpu, handle in found:
        try:
            ends[gpu.uuid] = read_nvlinks(api, handle)
        except NvmlError as exc:
            log.warning("cannot read the NVLinks of GPU %d (%s): %s", gpu.index, gpu.uuid, exc)
    return ends


def _kept_from(
    previous: Topology | None, failed: Mapping[int, str], readable: set[str]
) -> dict[str, Gpu]:
    """GPUs known before that sit at an index that cannot be read now."""
    if previous is None:
        return {}
    by_index = previous.by_index()
    return {
        by_index[i].uuid: by_index[i]
        for i in failed
        if i in by_index and by_index[i].uuid not in readable
    }


def discover(api: NvmlApi, *, name: str, previous: Topology | None = None) -> Discovery:
    """Read the node; GPUs that cannot be read never stop the others from being found."""
    found, failed = _read_all(api)
    gpus = [gpu for gpu, _ in found]
    links: dict[tuple[str, str], Link] = build_links(
        gpus, _nvlinks(api, found), _pcie_levels(api, found)
    )
    kept = _kept_from(previous, failed, {g.uuid for g in gpus})
    if previous is not None and kept:
        keep = {*kept, *(g.uuid for g in gpus)}
        links.update({k: v for k, v in previous.links.items() if k[0] in kept or k[1] in kept})
        links = {k: v for k, v in links.items() if k[0] in keep and k[1] in keep}
    problems = tuple(f"GPU {i} cannot be read: {why}" for i, why in sorted(failed.items()))
    for line in problems:
        log.warning("%s", line)
    return Discovery(
        topology=Topology(name=name, gpus=(*gpus, *kept.values()), links=links),
        handles={gpu.uuid: handle for gpu, handle in found},
        problems=problems,
        lost={uuid: failed[gpu.index] for uuid, gpu in kept.items()},
    )
