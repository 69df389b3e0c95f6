"""AMD topology text: `rocm-smi --showtopo` and `amd-smi topology`.

Both print square tables of GPU pairs. rocm-smi titles each table between rows of `=`
(`Weight between two GPUs`, `Hops between two GPUs`, `Link Type between two GPUs`) with
`GPU0 GPU1 ...` headers, and lists NUMA nodes as `GPU[0] : (Topology) Numa Node: 0`.
amd-smi titles them `WEIGHT TABLE:`, `HOPS TABLE:`, `LINK TYPE TABLE:` and labels rows and
columns with PCI bus ids, in GPU index order. Any subset of the tables is read.

rocm-smi prints a message for each pair it cannot read (`ERROR: GPU[1] : Cannot read Link
Weight: ...`) between a title and its table, so a table's header is its first line of GPU
labels, not its first line. A table is filed under its title, except one whose cells are all
link types (`XGMI`, `PCIE`, or `XXXX`, rocm-smi's word for a type it cannot name): that is a
link type table whatever it is titled, as in pastes whose titles were cut.

The model's links follow the amdsmi backend (`inventory/amd/backend.py`): an XGMI pair one hop away
counts one XGMI link. Both tools report 1 hop for every XGMI pair, even those routed through
other GPUs, so where a weight table is given an XGMI pair is direct only at weight 15 (each
XGMI hop weighs 15). The PCIe level is `NODE` for 2 hops (one CPU socket) and `SYS` for 3,
else `NODE` or `SYS` by the GPUs' NUMA nodes, else unknown.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuallocd.errors import InventoryError
from gpuallocd.model import Gpu, Link, PcieLevel, Topology, pair_key
from gpuallocd.topology.smi_text import synthetic_uuid
from gpuallocd.topology.text_lines import Line, clean_lines

__all__ = ["is_amd_text", "parse_amd_topo"]

_ROCM_TITLE = re.compile(r"^=+\s*(.*?)\s*=+$")
_AMD_TITLE = re.compile(r"^([A-Z][A-Z -]*) TABLE:$")
_ROCM_NUMA = re.compile(r"^GPU\[(\d+)\]\s*:\s*\(Topology\) Numa Node:\s*(\d+)\s*$")
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_GPU = re.compile(r"^GPU(\d+)$")
_TABLES = {"weight": "weight", "hops": "hops", "link type": "link type"}
_XGMI_HOP_WEIGHT = 15
_LINK_TYPES = frozenset({"XGMI", "PCIE", "XXXX"})


@dataclass
class AmdTables:
    """What the text says: GPU labels in index order, pair tables, NUMA nodes."""

    labels: list[str] = field(default_factory=list)
    tables: dict[str, dict[tuple[int, int], str]] = field(default_factory=dict)
    numa: dict[int, int] = field(default_factory=dict)


def is_amd_text(text: str) -> bool:
    """Whether the text looks like rocm-smi or amd-smi topology output."""
    markers = ("ROCm System Management Interface", "between two GPUs", "(Topology) Numa Node")
    return any(m in text for m in markers) or bool(
        re.search(r"^\s*(LINK TYPE|HOPS|WEIGHT|ACCESS) TABLE:\s*$", text, re.MULTILINE)
    )


def _table_name(line: Line) -> str | None:
    text = line.text.strip()
    rocm = _ROCM_TITLE.match(text)
    if rocm:
        title = rocm.group(1).lower().removesuffix(" between two gpus")
        return _TABLES.get(title, "")
    amd = _AMD_TITLE.match(text)
    if amd:
        return _TABLES.get(amd.group(1).lower(), "")
    return None


def _is_label(cell: str) -> bool:
    return bool(_GPU.match(cell) or _BDF.match(cell))


def _is_header(line: Line) -> bool:
    cells = line.text.split()
    return bool(cells) and all(_is_label(c) for c in cells)


def _kind(name: str, table: dict[tuple[int, int], str]) -> str:
    """The table's kind: its title's, or `link type` where every pair names a link type."""
    pairs = {cell for (a, b), cell in table.items() if a != b}
    return "link type" if pairs and pairs <= _LINK_TYPES else name


def _read_table(lines: Sequence[Line], found: AmdTables, name: str) -> None:
    header = next((ln for ln in lines if _is_header(ln)), None)
    if header is None:
        return
    columns = header.text.split()
    if not found.labels:
        found.labels = columns
    index = {label: i for i, label in enumerate(found.labels)}
    table: dict[tuple[int, int], str] = {}
    for line in lines[lines.index(header) + 1 :]:
        cells = line.text.split()
        if not cells or cells[0] not in index:
            break
        for column, cell in zip(columns, cells[1:], strict=False):
            if column not in index:
                raise InventoryError(
                    f"line {header.number}: column {column} is not a GPU of the first table",
                    line=header.number,
                )
            table[(index[cells[0]], index[column])] = cell.upper()
    found.tables.setdefault(_kind(name, table), {}).update(table)


def _sections(lines: list[Line]) -> list[tuple[str, list[Line]]]:
    sections: list[tuple[str, list[Line]]] = []
    for line in lines:
        name = _table_name(line)
        if name is not None:
            sections.append((name, []))
        elif sections:
            sections[-1][1].append(line)
    return sections


def read_tables(text: str) -> AmdTables:
    """The tables and NUMA nodes of AMD topology text."""
    lines = clean_lines(text)
    found = AmdTables()
    for name, body in _sections(lines):
        if name:
            _read_table(body, found, name)
    for line in lines:
        numa = _ROCM_NUMA.match(line.text.strip())
        if numa:
            found.numa[int(numa.group(1))] = int(numa.group(2))
    return found


def _indices(found: AmdTables) -> list[int]:
    if found.labels:
        return list(range(len(found.labels)))
    return sorted(found.numa)


def _int_cell(found: AmdTables, name: str, a: int, b: int) -> int | None:
    cell = found.tables.get(name, {}).get((a, b))
    return int(cell) if cell is not None and cell.isdigit() else None


def _pcie(found: AmdTables, a: int, b: int, hops: int | None, kind: str | None) -> PcieLevel | None:
    if kind == "PCIE" and hops in (2, 3):
        return PcieLevel.NODE if hops == 2 else PcieLevel.SYS
    if a in found.numa and b in found.numa:
        return PcieLevel.NODE if found.numa[a] == found.numa[b] else PcieLevel.SYS
    return None


def _link(found: AmdTables, a: int, b: int) -> Link:
    kind = found.tables.get("link type", {}).get((a, b))
    hops = _int_cell(found, "hops", a, b)
    weight = _int_cell(found, "weight", a, b)
    direct = kind == "XGMI" and (
        weight == _XGMI_HOP_WEIGHT if weight is not None else hops in (None, 1)
    )
    return Link(xgmi=1 if direct else 0, pcie=_pcie(found, a, b, hops, kind))


def _gpu(found: AmdTables, index: int) -> Gpu:
    label = found.labels[index] if index < len(found.labels) else f"GPU{index}"
    return Gpu(
        uuid=synthetic_uuid(index),
        index=index,
        name=f"GPU {index}",
        vendor="amd",
        pci_bus_id=label if _BDF.match(label) else None,
        numa_node=found.numa.get(index),
    )


def parse_amd_topo(text: str, *, name: str = "amd-topology") -> Topology:
    """Read `rocm-smi --showtopo` or `amd-smi topology` text into a Topology."""
    found = read_tables(text)
    indices = _indices(found)
    if not indices:
        raise InventoryError(
            "no GPU found in the AMD topology text: expected a `Link Type between two GPUs` "
            "or `LINK TYPE TABLE:` table, or `GPU[0] : (Topology) Numa Node:` lines"
        )
    gpus = tuple(_gpu(found, i) for i in indices)
    links = {
        pair_key(gpus[a].uuid, gpus[b].uuid): _link(found, a, b)
        for a in range(len(gpus))
        for b in range(a + 1, len(gpus))
    }
    return Topology(name=name, gpus=gpus, links=links)
