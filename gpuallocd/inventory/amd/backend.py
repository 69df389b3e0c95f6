"""The amdsmi inventory: AMD Instinct and Radeon GPUs, their XGMI and PCIe links.

Links: an XGMI link one hop away counts as one XGMI link (`Link.xgmi = 1`); GPUs reached
over XGMI through other GPUs, or only over PCIe, get no XGMI count. Two partitions of one
physical GPU (compute partition DPX/QPX/CPX) share the die's own fabric, reported as one
XGMI hop at PCIe level PIX. The PCIe level is coarse: NODE within a NUMA node, SYS across.
Health comes from reads only: a GPU that cannot be read is unhealthy (amdsmi's RAS events
are not watched yet). See docs/hardware.md for what was and was not seen on hardware.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuallocd.errors import InventoryError
from gpuallocd.host.proc import process_owner
from gpuallocd.inventory.amd.gate import (
    AMDSMI_NOT_SUPPORTED,
    LINK_INTERNAL,
    LINK_XGMI,
    AmdGate,
    amdsmi_code,
)
from gpuallocd.inventory.calls import CallWatch
from gpuallocd.model import Gpu, GpuProcess, Link, LiveState, PcieLevel, Topology, pair_key

__all__ = ["AmdDiscovery", "AmdInventory"]


@dataclass(frozen=True)
class AmdDiscovery:
    topology: Topology
    handles: Mapping[str, object] = field(default_factory=dict)
    problems: tuple[str, ...] = ()


def _optional(gate: AmdGate, name: str, *args: object) -> Any:
    """The answer, or None where amdsmi says this GPU does not support the query."""
    try:
        return gate.call(name, *args)
    except InventoryError as exc:
        if amdsmi_code(exc) == AMDSMI_NOT_SUPPORTED:
            return None
        raise


def _percent(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None  # "N/A" where unknown


def read_gpu(gate: AmdGate, index: int, handle: object) -> Gpu:
    asic = _optional(gate, "amdsmi_get_gpu_asic_info", handle) or {}
    total = _optional(gate, "amdsmi_get_gpu_memory_total", handle, gate.vram())
    numa = _optional(gate, "amdsmi_topo_get_numa_node_number", handle)
    partition = _optional(gate, "amdsmi_get_gpu_compute_partition", handle)
    return Gpu(
        uuid=str(gate.call("amdsmi_get_gpu_device_uuid", handle)),
        index=index,
        name=str(asic.get("market_name") or "AMD GPU"),
        pci_bus_id=str(gate.call("amdsmi_get_gpu_device_bdf", handle)),
        memory_total_bytes=None if total is None else int(total),
        numa_node=None if numa is None else int(numa),
        vendor="amd",
        compute_capability=asic.get("target_graphics_version"),
        compute_partition=str(partition) if partition else None,
    )


def _pcie(a: Gpu, b: Gpu) -> PcieLevel | None:
    if a.numa_node is None or b.numa_node is None:
        return None
    return PcieLevel.NODE if a.numa_node == b.numa_node else PcieLevel.SYS


def _link(gate: AmdGate, a: tuple[Gpu, object], b: tuple[Gpu, object]) -> tuple[Link, bool]:
    """The link between two GPUs, and whether they are partitions of one physical GPU."""
    pcie = _pcie(a[0], b[0])
    found = _optional(gate, "amdsmi_topo_get_link_type", a[1], b[1])
    kind, hops = (None, None) if not found else (found.get("type"), found.get("hops"))
    if kind == LINK_INTERNAL:
        return Link(xgmi=1, pcie=PcieLevel.PIX), True
    return Link(xgmi=1 if kind == LINK_XGMI and hops == 1 else 0, pcie=pcie), False


def _with_parents(gpus: list[Gpu], siblings: list[tuple[str, str]]) -> list[Gpu]:
    """Partitions of one physical GPU (joined by its internal fabric) get `partition_of`:
    the UUID of the group's first partition, which stands for the physical GPU."""
    parent = {g.uuid: g.uuid for g in gpus}

    def root(uuid: str) -> str:
        while parent[uuid] != uuid:
            uuid = parent[uuid]
        return uuid

    for a, b in siblings:
        first, second = sorted((root(a), root(b)), key=[g.uuid for g in gpus].index)
        parent[second] = first
    grouped = {g.uuid: root(g.uuid) for g in gpus}
    sizes = {r: list(grouped.values()).count(r) for r in set(grouped.values())}
    return [
        replace(g, partition_of=grouped[g.uuid]) if sizes[grouped[g.uuid]] > 1 else g for g in gpus
    ]


def discover(gate: AmdGate, *, name: str) -> AmdDiscovery:
    """Read the node; a GPU that cannot be read is left out with a problem line."""
    found: list[tuple[Gpu, object]] = []
    problems = []
    for index, handle in enumerate(gate.call("amdsmi_get_processor_handles")):
        try:
            found.append((read_gpu(gate, index, handle), handle))
        except InventoryError as exc:
            problems.append(f"AMD GPU {index} cannot be read: {exc.message}")
    links = {}
    siblings = []
    for i, a in enumerate(found):
        for b in found[i + 1 :]:
            try:
                link, internal = _link(gate, a, b)
            except InventoryError:
                continue  # one of the two was lost since it was read
            links[pair_key(a[0].uuid, b[0].uuid)] = link
            if internal:
                siblings.append((a[0].uuid, b[0].uuid))
    gpus = _with_parents([g for g, _ in found], siblings)
    return AmdDiscovery(
        topology=Topology(name=name, gpus=tuple(gpus), links=links),
        handles={g.uuid: h for g, h in found},
        problems=tuple(problems),
    )


def _processes(gate: AmdGate, handle: object) -> tuple[GpuProcess, ...]:
    found = _optional(gate, "amdsmi_get_gpu_process_list", handle) or []
    processes = []
    for entry in found:
        pid = int(entry["pid"])
        used = (entry.get("memory_usage") or {}).get("vram_mem", entry.get("mem"))
        processes.append(GpuProcess(pid=pid, used_memory_bytes=used, uid=process_owner(pid)))
    return tuple(processes)


def sample_gpu(gate: AmdGate, handle: object) -> LiveState:
    try:
        used = int(gate.call("amdsmi_get_gpu_memory_usage", handle, gate.vram()))
        activity = _optional(gate, "amdsmi_get_gpu_activity", handle) or {}
        processes = _processes(gate, handle)
    except InventoryError as exc:
        return LiveState(healthy=False, health_reason=f"GPU cannot be read: {exc.message}")
    return LiveState(
        memory_used_bytes=used,
        utilization_percent=_percent(activity.get("gfx_activity")),
        processes=processes,
    )


class AmdInventory:
    """AMD GPUs through amdsmi; `amdsmi` replaces the module (the fake in gpuallocd.testing)."""

    def __init__(self, amdsmi: Any | None = None, *, name: str | None = None) -> None:
        self._gate = AmdGate(amdsmi)
        self._name = name or socket.gethostname()
        self._lock = threading.Lock()
        self._gate.start()
        try:
            self._found = discover(self._gate, name=self._name)
        except InventoryError:
            self._gate.shutdown()
            raise

    def topology(self) -> Topology:
        return self._found.topology

    def problems(self) -> tuple[str, ...]:
        return self._found.problems

    def rescan(self) -> Topology:
        with self._lock:
            self._found = discover(self._gate, name=self._name)
            return self._found.topology

    def sample(self) -> dict[str, LiveState]:
        found = self._found
        return {g.uuid: sample_gpu(self._gate, found.handles[g.uuid]) for g in found.topology.gpus}

    def driver_calls(self) -> CallWatch:
        """The amdsmi calls running now."""
        return self._gate.calls

    def close(self) -> None:
        self._gate.shutdown()
