"""The matrix that `nvidia-smi topo -m` prints, read as people paste it.

nvidia-smi writes tab-separated cells padded to 8-column tab stops: the header names the
GPU columns, then NIC columns (`NIC0`, or `mlx5_0` on older drivers), then `CPU Affinity`,
`NUMA Affinity` and `GPU NUMA ID` where the driver has them; one row per GPU, then NIC rows,
then a legend. What reaches gpuallocd has often been through a terminal or a web page: tabs
become spaces, lines get indented, quoted (`> `), prefixed by a prompt or prose, cut at the
terminal's width, or glued where a tab was lost. This reader finds the header, reads each GPU
row's link cells in column order, and places the affinity cells by their column (see
`text_lines`). GPUs read this way get stable synthetic UUIDs.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

from gpuallocd.errors import InventoryError
from gpuallocd.model import Gpu, Link, PcieLevel, Topology, pair_key
from gpuallocd.topology.smi_layout import Matrix, find_matrix
from gpuallocd.topology.smi_render import render_smi_topo
from gpuallocd.topology.text_lines import Token

__all__ = ["numa_node_of", "parse_smi_topo", "render_smi_topo", "synthetic_uuid"]

_NV = re.compile(r"^NV(\d+)$")
_UUID_NAMESPACE = uuid.UUID("6f1c2d4e-8a53-4b8e-9d0c-3f5a7e2b9c10")
_LEVEL_ALIASES = {"SOC": PcieLevel.SYS}  # drivers before 2017 printed SOC for SYS
_NUMA_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def synthetic_uuid(index: int) -> str:
    """A stable, NVIDIA-shaped UUID for GPU `index` of a topology file."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'topology-gpu-{index}')}"


def _link_from_cell(cell: Token, line: int) -> Link:
    match = _NV.match(cell.text)
    if match:
        return Link(nvlinks=int(match.group(1)))
    level = _LEVEL_ALIASES.get(cell.text)
    if level is None and cell.text in PcieLevel.__members__:
        level = PcieLevel[cell.text]
    if level is None:
        raise InventoryError(
            f"line {line}: unknown link kind {cell.text!r} in the topology matrix "
            "(expected X, NV#, PIX, PXB, PHB, NODE, SYS or SOC)",
            line=line,
        )
    return Link(pcie=level)


def numa_node_of(cell: str | None) -> int | None:
    """The one NUMA node a cell names: `3` or `3-3`; none for `N/A`, blank or several."""
    match = _NUMA_RANGE.match(cell or "")
    if not match:
        return None
    first, last = match.group(1), match.group(2)
    return int(first) if last is None or last == first else None


def _affinity(cells: dict[str, str], label: str) -> str | None:
    value = cells.get(label)
    return value if value and value != "N/A" else None


def _gpu(index: int, affinity: dict[str, str]) -> Gpu:
    numa = numa_node_of(affinity.get("GPU NUMA ID"))
    for label in ("NUMA Affinity", "NUMA"):
        if numa is None:
            numa = numa_node_of(affinity.get(label))
    return Gpu(
        uuid=synthetic_uuid(index),
        index=index,
        name=f"GPU {index}",
        numa_node=numa,
        cpu_affinity=_affinity(affinity, "CPU Affinity"),
    )


def _column_of(cell: Token, columns: tuple[Token, ...]) -> str:
    """The rightmost column starting at most one tab stop right of the cell.

    nvidia-smi pads a row's cells with tabs but not always to its header's columns: a short
    CPU list or a blank cell leaves the next value up to one tab stop left of its label.
    """
    placed = [column for column in columns if column.start <= cell.start + 8]
    return (placed[-1] if placed else columns[0]).text


def _affinity_cells(matrix: Matrix, index: int) -> dict[str, str]:
    """Each affinity cell of a GPU row with its header label.

    As many cells as labels: in order. Fewer (blank cells): by column.
    """
    columns = matrix.affinity_columns
    cells = matrix.rows[index].cells[len(matrix.devices) :]
    if not columns:
        return {}
    if len(cells) == len(columns):
        return {column.text: cell.text for column, cell in zip(columns, cells, strict=True)}
    found: dict[str, str] = {}
    for cell in cells:
        found.setdefault(_column_of(cell, columns), cell.text)
    return found


def _pairs(matrix: Matrix) -> Iterator[tuple[int, int]]:
    for a in matrix.gpu_indices:
        for b in matrix.gpu_indices:
            if a < b:
                yield a, b


def _links(matrix: Matrix, uuids: dict[int, str]) -> dict[tuple[str, str], Link]:
    links: dict[tuple[str, str], Link] = {}
    for a, b in _pairs(matrix):
        row = matrix.rows[a]
        cell = row.link_to(matrix.gpu_columns[b])
        links[pair_key(uuids[a], uuids[b])] = _link_from_cell(cell, row.line)
    return links


def parse_smi_topo(text: str, *, name: str = "nvidia-smi-topo") -> Topology:
    """Read the text of `nvidia-smi topo -m` into a Topology."""
    matrix = find_matrix(text)
    gpus = tuple(_gpu(i, _affinity_cells(matrix, i)) for i in matrix.gpu_indices)
    uuids = {gpu.index: gpu.uuid for gpu in gpus}
    return Topology(name=name, gpus=gpus, links=_links(matrix, uuids))
