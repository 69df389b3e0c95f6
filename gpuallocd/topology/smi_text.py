"""The matrix that `nvidia-smi topo -m` prints, read and written.

Cells are tab-separated and padded with spaces; newer drivers wrap the header in an ANSI
underline and add NIC rows and columns, `CPU Affinity`, `NUMA Affinity` and `GPU NUMA ID`
columns; a legend follows the matrix. GPUs read this way get stable synthetic UUIDs.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

from gpuallocd.errors import InventoryError
from gpuallocd.model import Gpu, Link, PcieLevel, Topology, pair_key

__all__ = ["parse_smi_topo", "render_smi_topo", "synthetic_uuid"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_NV = re.compile(r"^NV(\d+)$")
_UUID_NAMESPACE = uuid.UUID("6f1c2d4e-8a53-4b8e-9d0c-3f5a7e2b9c10")


def synthetic_uuid(index: int) -> str:
    """A stable, NVIDIA-shaped UUID for GPU `index` of a topology file."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'topology-gpu-{index}')}"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in _ANSI.sub("", line).split("\t")]


def _matrix_lines(text: str) -> Iterator[list[str]]:
    """The header and the rows of the matrix, up to the legend."""
    for raw in text.splitlines():
        if raw.strip().startswith("Legend"):
            return
        if raw.strip():
            yield _cells(raw)


def _link_from_cell(cell: str) -> Link:
    match = _NV.match(cell)
    if match:
        return Link(nvlinks=int(match.group(1)))
    try:
        return Link(pcie=PcieLevel[cell])
    except KeyError:
        raise InventoryError(f"unknown link kind {cell!r} in the topology matrix") from None


def _optional_int(cell: str | None) -> int | None:
    if cell is None or not cell.strip().isdigit():
        return None
    return int(cell)


def parse_smi_topo(text: str, *, name: str = "nvidia-smi-topo") -> Topology:
    """Read the text of `nvidia-smi topo -m` into a Topology."""
    lines = list(_matrix_lines(text))
    if not lines:
        raise InventoryError("the topology text is empty")
    header = lines[0]
    columns = {label: i for i, label in enumerate(header) if label}
    gpu_columns = {
        int(m.group(1)): i for label, i in columns.items() if (m := _GPU_LABEL.match(label))
    }
    if not gpu_columns:
        raise InventoryError("no GPU columns found: is this the output of `nvidia-smi topo -m`?")
    rows = {int(m.group(1)): row for row in lines[1:] if (m := _GPU_LABEL.match(row[0]))}
    if set(rows) != set(gpu_columns):
        raise InventoryError("the GPU rows do not match the GPU columns of the topology matrix")
    gpus = tuple(_gpu_from_row(index, row, columns) for index, row in sorted(rows.items()))
    links: dict[tuple[str, str], Link] = {}
    for a in gpus:
        for b in gpus:
            if a.index < b.index:
                cell = _cell(rows[a.index], gpu_columns[b.index])
                links[pair_key(a.uuid, b.uuid)] = _link_from_cell(cell)
    return Topology(name=name, gpus=gpus, links=links)


def _cell(row: list[str], column: int) -> str:
    # Rows start with their label, so column i of the header is cell i of the row.
    if column >= len(row):
        raise InventoryError(f"row {row[0]} of the topology matrix is too short")
    return row[column]


def _gpu_from_row(index: int, row: list[str], columns: dict[str, int]) -> Gpu:
    def column(label: str) -> str | None:
        i = columns.get(label)
        return row[i] if i is not None and i < len(row) else None

    numa = _optional_int(column("GPU NUMA ID"))
    if numa is None:
        numa = _optional_int(column("NUMA Affinity"))
    affinity = column("CPU Affinity")
    return Gpu(
        uuid=synthetic_uuid(index),
        index=index,
        name=f"GPU {index}",
        numa_node=numa,
        cpu_affinity=affinity if affinity and affinity != "N/A" else None,
    )


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
