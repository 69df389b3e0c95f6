"""The node as data: GPUs, the links between them, and their live state.

Everything here is immutable. A GPU is identified by its UUID; the index is only what
`nvidia-smi` and CUDA show.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gpuallocd.errors import UnknownGpu

__all__ = [
    "Gpu",
    "GpuProcess",
    "Link",
    "LiveState",
    "MigDevice",
    "PcieLevel",
    "Topology",
    "pair_key",
]


class PcieLevel(enum.IntEnum):
    """The PCIe path between two GPUs; a higher value is a shorter, faster path."""

    SYS = 1  # across the NUMA interconnect (QPI/UPI, Infinity Fabric between sockets)
    NODE = 2  # between PCIe host bridges within one NUMA node
    PHB = 3  # through one PCIe host bridge (the CPU)
    PXB = 4  # several PCIe bridges, no host bridge
    PIX = 5  # at most one PCIe bridge


@dataclass(frozen=True, slots=True)
class Link:
    """How two GPUs talk to each other.

    `pcie` is None where the path is unknown: `nvidia-smi topo -m` prints `NV#` for
    NVLink pairs and so hides their PCIe path.
    """

    nvlinks: int = 0
    pcie: PcieLevel | None = None
    xgmi: int = 0
    nvswitch: bool = False


NO_LINK = Link()


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG instance of a GPU, as NVML reports it: a leasable unit of its own."""

    uuid: str
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    profile: str | None = None
    memory_total_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Gpu:
    """One allocatable GPU as discovered or read from a topology file."""

    uuid: str
    index: int
    name: str = "unknown"
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None
    numa_node: int | None = None
    cpu_affinity: str | None = None
    vendor: str = "nvidia"
    compute_capability: str | None = None
    mig_mode: bool = False  # NVIDIA MIG enabled now (not merely pending)
    mig_devices: tuple[MigDevice, ...] = ()
    compute_partition: str | None = None  # AMD compute partition mode: SPX, DPX, QPX, CPX
    partition_of: str | None = None  # AMD: the physical GPU (its first partition's UUID)


def pair_key(a: str, b: str) -> tuple[str, str]:
    """The key of an unordered pair of GPU UUIDs."""
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True)
class Topology:
    """The GPUs of one node, ordered by index, and every pairwise link."""

    name: str
    gpus: tuple[Gpu, ...]
    links: Mapping[tuple[str, str], Link] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", tuple(sorted(self.gpus, key=lambda g: g.index)))
        object.__setattr__(self, "links", MappingProxyType(dict(self.links)))

    def link(self, a: str, b: str) -> Link:
        """The link between two GPUs (an empty link where none is known)."""
        return self.links.get(pair_key(a, b), NO_LINK)

    def by_uuid(self) -> dict[str, Gpu]:
        return {g.uuid: g for g in self.gpus}

    def by_index(self) -> dict[int, Gpu]:
        return {g.index: g for g in self.gpus}

    def uuids(self) -> tuple[str, ...]:
        return tuple(g.uuid for g in self.gpus)

    def resolve(self, ref: int | str) -> str:
        """The UUID of a GPU named by its UUID or by its index (an int, or a string of digits).

        The one place a GPU reference is resolved: the daemon, `plan`, `simulate` and the CLI
        all name GPUs this way. Raises UnknownGpu, listing the indices this node has.
        """
        text = str(ref).strip()
        if text.isascii() and text.isdigit():
            gpu = self.by_index().get(int(text))
            if gpu is not None:
                return gpu.uuid
        elif text in self.by_uuid():
            return text
        known = ", ".join(str(g.index) for g in self.gpus)
        raise UnknownGpu(f"no GPU {text!r} on {self.name} (indices {known})", gpu=text)

    def resolve_all(self, refs: Iterable[int | str]) -> tuple[str, ...]:
        """`resolve` for each reference, in order."""
        return tuple(self.resolve(ref) for ref in refs)

    def instances(self) -> dict[str, tuple[Gpu, MigDevice]]:
        """Every MIG instance of a GPU in MIG mode, by its `MIG-` UUID, with its GPU."""
        return {m.uuid: (g, m) for g in self.gpus if g.mig_mode for m in g.mig_devices}


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process seen on a GPU."""

    pid: int
    used_memory_bytes: int | None = None
    uid: int | None = None
    gpu_instance_id: int | None = None  # on a GPU in MIG mode: the instance it runs in
    compute_instance_id: int | None = None


@dataclass(frozen=True, slots=True)
class LiveState:
    """What a GPU is doing right now, where the backend can tell."""

    healthy: bool = True
    health_reason: str | None = None
    lost: bool = False  # fallen off the bus (NVML: GPU is lost); unhealthy until it answers
    memory_used_bytes: int | None = None
    utilization_percent: float | None = None
    processes: tuple[GpuProcess, ...] = ()
    # The energy counter (whole GPUs, Volta on; docs/accounting.md). Not compared: it moves
    # at every sample, and a sample that changes nothing else leaves the node's view as it is.
    energy_mj: int | None = field(default=None, compare=False)


HEALTHY = LiveState()
