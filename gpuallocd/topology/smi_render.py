"""A Topology written back the way `nvidia-smi topo -m` prints it."""

from __future__ import annotations

from gpuallocd.model import Link, Topology

__all__ = ["render_smi_topo"]

_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def _render_link(link: Link) -> str:
    if link.nvlinks:
        return f"NV{link.nvlinks}"
    if link.pcie is not None:
        return link.pcie.name
    return "SYS"


def render_smi_topo(topology: Topology) -> str:
    """Write a Topology the way `nvidia-smi topo -m` prints it (without NIC rows)."""
    gpus = topology.gpus
    header = "\t" + "\t".join(f"GPU{g.index}" for g in gpus) + "\tCPU Affinity\tNUMA Affinity"
    lines = [header]
    for a in gpus:
        cells = [
            " X " if a.uuid == b.uuid else _render_link(topology.link(a.uuid, b.uuid)) for b in gpus
        ]
        numa = "N/A" if a.numa_node is None else str(a.numa_node)
        lines.append("\t".join([f"GPU{a.index}", *cells, a.cpu_affinity or "N/A", numa]))
    return "\n".join(lines) + "\n" + _LEGEND
