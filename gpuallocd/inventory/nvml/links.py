"""Links between GPUs from NVML: PCIe common ancestors, direct NVLinks, NVSwitch fabrics.

An NVLink whose far end is an NVSwitch joins the GPU to a fabric, and every GPU on one
fabric reaches every other at the bandwidth of its switch links. Reading only the
GPU-to-GPU NVLinks (as go-gpuallocator does) would score a DGX A100 or H100 as PCIe-only.
GPUs belong to one fabric when they link to a common switch (by the switch's PCI bus id).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuallocd.errors import NvmlError
from gpuallocd.inventory.nvml.api import NvmlApi, optional
from gpuallocd.inventory.nvml.gate import NvmlCode, nvml_code
from gpuallocd.model import Gpu, Link, PcieLevel, pair_key

__all__ = ["NvLinkEnd", "build_links", "normalize_bus_id", "pcie_level", "read_nvlinks"]

# NVML_NVLINK_DEVICE_TYPE_*
REMOTE_GPU = 0
REMOTE_IBMNPU = 1
REMOTE_SWITCH = 2

# NVML_TOPOLOGY_* (the deepest common PCIe ancestor) to the level `nvidia-smi topo -m` prints.
_PCIE_LEVELS = {
    0: PcieLevel.PIX,  # INTERNAL: two GPUs on one board, behind its own bridge
    10: PcieLevel.PIX,  # SINGLE
    20: PcieLevel.PXB,  # MULTIPLE
    30: PcieLevel.PHB,  # HOSTBRIDGE
    40: PcieLevel.NODE,  # NODE
    50: PcieLevel.SYS,  # SYSTEM
}

UNKNOWN_SWITCH = "unknown-switch"


@dataclass(frozen=True, slots=True)
class NvLinkEnd:
    """The far end of one active NVLink of a GPU."""

    remote_bus_id: str | None
    remote_type: int | None


def normalize_bus_id(bus_id: str) -> str:
    """`00000000:07:00.0` and `0000:07:00.0` both as `0000:07:00.0`."""
    try:
        domain, bus, rest = bus_id.strip().split(":")
        device, function = rest.split(".")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16)}"
    except ValueError:
        return bus_id.strip().lower()


def pcie_level(nvml_level: int | None) -> PcieLevel | None:
    return None if nvml_level is None else _PCIE_LEVELS.get(nvml_level)


def read_nvlinks(api: NvmlApi, handle: object) -> tuple[NvLinkEnd, ...]:
    """The far ends of the GPU's active NVLinks (none where the GPU has no NVLink)."""
    ends = []
    for link in range(api.nvlink_slots()):
        try:
            active = api.nvlink_active(handle, link)
        except NvmlError as exc:
            if nvml_code(exc) == NvmlCode.NOT_SUPPORTED:
                break  # no NVLink on this GPU, or no more links
            if nvml_code(exc) == NvmlCode.INVALID_ARGUMENT:
                continue  # no link with this number on this GPU
            raise
        if active:
            bus_id = optional(api.nvlink_remote_bus_id, handle, link)
            ends.append(
                NvLinkEnd(
                    remote_bus_id=None if bus_id is None else normalize_bus_id(bus_id),
                    remote_type=optional(api.nvlink_remote_type, handle, link),
                )
            )
    return tuple(ends)


def _classify(end: NvLinkEnd, gpu_by_bus: Mapping[str, str]) -> tuple[str, str] | None:
    """('gpu', uuid) or ('switch', switch id) for one link end; None for a CPU or unknown GPU."""
    peer = gpu_by_bus.get(end.remote_bus_id or "")
    if peer is not None:
        return "gpu", peer
    if end.remote_type in (REMOTE_GPU, REMOTE_IBMNPU):
        return None  # a GPU we could not read, or a POWER CPU
    # A switch, or a far end older drivers cannot name that is no GPU of this node.
    return "switch", end.remote_bus_id or UNKNOWN_SWITCH


def _fabrics(switch_links: Mapping[str, Counter[str]]) -> dict[str, int]:
    """Fabric number per GPU: GPUs linked to a common switch, directly or through others."""
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        while parent.setdefault(node, node) != node:
            node = parent[node]
        return node

    for uuid, switches in switch_links.items():
        for switch in switches:
            parent[root(f"gpu:{uuid}")] = root(f"switch:{switch}")
    numbers: dict[str, int] = {}
    return {u: numbers.setdefault(root(f"gpu:{u}"), len(numbers)) for u in sorted(switch_links)}


def _tally(
    gpus: Sequence[Gpu], nvlinks: Mapping[str, Sequence[NvLinkEnd]]
) -> tuple[Counter[tuple[str, str]], dict[str, Counter[str]]]:
    """Direct NVLinks per (from, to) GPU, and switch links per GPU by switch."""
    gpu_by_bus = {normalize_bus_id(g.pci_bus_id): g.uuid for g in gpus if g.pci_bus_id}
    direct: Counter[tuple[str, str]] = Counter()
    switch: dict[str, Counter[str]] = {}
    for gpu in gpus:
        for end in nvlinks.get(gpu.uuid, ()):
            kind = _classify(end, gpu_by_bus)
            if kind is None:
                continue
            if kind[0] == "gpu":
                direct[(gpu.uuid, kind[1])] += 1
            else:
                switch.setdefault(gpu.uuid, Counter())[kind[1]] += 1
    return direct, switch


def build_links(
    gpus: Sequence[Gpu],
    nvlinks: Mapping[str, Sequence[NvLinkEnd]],
    pcie: Mapping[tuple[str, str], PcieLevel | None],
) -> dict[tuple[str, str], Link]:
    """Every pairwise link: PCIe level, direct NVLinks plus NVSwitch lanes where shared."""
    direct, switch = _tally(gpus, nvlinks)
    fabric = _fabrics(switch)
    links = {}
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            lanes = max(direct[(a.uuid, b.uuid)], direct[(b.uuid, a.uuid)])
            shared = a.uuid in fabric and fabric.get(a.uuid) == fabric.get(b.uuid)
            if shared:
                lanes += min(sum(switch[a.uuid].values()), sum(switch[b.uuid].values()))
            key = pair_key(a.uuid, b.uuid)
            links[key] = Link(nvlinks=lanes, pcie=pcie.get(key), nvswitch=shared)
    return links
