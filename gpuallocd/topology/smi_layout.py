"""Where the `nvidia-smi topo -m` matrix is in a paste: its header, its GPU rows, its columns.

The header is the first line that names GPU columns (`GPU0 GPU1 ...`, glued or not) and has
no link cell, directly followed (blank lines aside) by a row: a label and a link cell. Rows,
GPU and NIC in any order, run until the first line that does not start with a device
label of the header (the legend, prose). A row's
link cells are taken in the header's column order, so the cell for GPU b is under GPU b's
column wherever NIC columns sit; the affinity cells come after all device columns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpuallocd.errors import InventoryError
from gpuallocd.topology.text_lines import Line, Token, clean_lines, split_glued, tokens

__all__ = ["AFFINITY_LABELS", "Matrix", "Row", "find_matrix"]

AFFINITY_LABELS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "NUMA")
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_LABEL_PIECE = re.compile(r"(?:GPU|NIC)\d+")
_LINK_CELL = re.compile(r"^(?:X|NV\d+|SYS|SOC|NODE|PHB|PXB|PIX)$")
_LINK_PIECE = re.compile(r"NV\d+|SYS|SOC|NODE|PHB|PXB|PIX|X")


@dataclass(frozen=True)
class Row:
    """One device row: its line number, its label and its cells after the label."""

    line: int
    label: str
    cells: tuple[Token, ...]

    def link_to(self, column: int) -> Token:
        """The link cell under device column `column`."""
        if column >= len(self.cells):
            raise InventoryError(
                f"line {self.line}: row {self.label} of the topology matrix is too short "
                f"(no cell for device column {column + 1})",
                line=self.line,
            )
        return self.cells[column]


@dataclass(frozen=True)
class Matrix:
    """The header's device columns and affinity columns, and the GPU rows by index."""

    header_line: int
    devices: tuple[str, ...]
    gpu_columns: dict[int, int]
    affinity_columns: tuple[Token, ...]
    rows: dict[int, Row]

    @property
    def gpu_indices(self) -> list[int]:
        return sorted(self.rows)


def _header_tokens(line: Line) -> list[Token]:
    found: list[Token] = []
    for token in tokens(line, AFFINITY_LABELS[:3]):
        found.extend(split_glued(token, _LABEL_PIECE))
    return found


def _row_tokens(line: Line) -> list[Token]:
    found: list[Token] = []
    for token in tokens(line):
        found.extend(split_glued(token, _LINK_PIECE))
    return found


def _is_header(found: Sequence[Token]) -> bool:
    texts = [t.text for t in found]
    return any(_GPU_LABEL.match(t) for t in texts) and not any(_LINK_CELL.match(t) for t in texts)


def _is_row(found: Sequence[Token]) -> bool:
    return len(found) >= 2 and bool(_LINK_CELL.match(found[1].text))


def _next_filled(lines: Sequence[Line], start: int) -> int | None:
    for position in range(start, len(lines)):
        if not lines[position].is_blank():
            return position
    return None


def _starts_matrix(lines: Sequence[Line], position: int) -> bool:
    if not _is_header(_header_tokens(lines[position])):
        return False
    following = _next_filled(lines, position + 1)
    if following is None:
        return False
    return _is_row(_row_tokens(lines[following]))


def _columns(header: list[Token], line: int) -> tuple[tuple[str, ...], tuple[Token, ...]]:
    devices = tuple(t.text for t in header if t.text not in AFFINITY_LABELS)
    affinity = tuple(t for t in header if t.text in AFFINITY_LABELS)
    first_affinity = next((i for i, t in enumerate(header) if t.text in AFFINITY_LABELS), None)
    if first_affinity is not None and len(devices) != first_affinity:
        raise InventoryError(
            f"line {line}: a device column follows the affinity columns in the header",
            line=line,
        )
    return devices, affinity


def _rows(lines: Sequence[Line], start: int, devices: tuple[str, ...]) -> list[Row]:
    """Rows up to the first line that does not start with a device label of the header."""
    rows: list[Row] = []
    for line in lines[start:]:
        if line.is_blank():
            continue
        found = _row_tokens(line)
        if len(found) < 2 or found[0].text not in devices:
            break
        rows.append(Row(line.number, found[0].text, tuple(found[1:])))
    return rows


def _gpu_columns(devices: tuple[str, ...]) -> dict[int, int]:
    """The column of each GPU, by GPU index (NIC columns may come anywhere)."""
    return {
        int(match.group(1)): column
        for column, label in enumerate(devices)
        if (match := _GPU_LABEL.match(label))
    }


def _gpu_rows(rows: list[Row], gpu_columns: dict[int, int], header_line: int) -> dict[int, Row]:
    by_label = {row.label: row for row in rows}
    missing = [f"GPU{i}" for i in sorted(gpu_columns) if f"GPU{i}" not in by_label]
    if missing:
        raise InventoryError(
            f"line {header_line}: the header names {', '.join(missing)} but no row of the "
            "matrix starts with it",
            line=header_line,
        )
    return {index: by_label[f"GPU{index}"] for index in gpu_columns}


def _no_matrix(lines: Sequence[Line]) -> InventoryError:
    named = next((ln for ln in lines if re.search(r"\bGPU\d+\b", ln.text)), None)
    if named is None:
        return InventoryError(
            "no `nvidia-smi topo -m` matrix found: no line names a GPU column (GPU0, GPU1, ...)"
        )
    return InventoryError(
        f"line {named.number}: names GPUs but no `nvidia-smi topo -m` matrix starts there: "
        "expected a header of GPU columns followed by rows such as `GPU0  X  NV4 ...`",
        line=named.number,
    )


def find_matrix(text: str) -> Matrix:
    """The first `nvidia-smi topo -m` matrix in `text`, or an error naming the line."""
    lines = clean_lines(text)
    start = next((i for i in range(len(lines)) if _starts_matrix(lines, i)), None)
    if start is None:
        raise _no_matrix(lines)
    header_line = lines[start].number
    devices, affinity = _columns(_header_tokens(lines[start]), header_line)
    gpu_columns = _gpu_columns(devices)
    rows = _gpu_rows(_rows(lines, start + 1, devices), gpu_columns, header_line)
    return Matrix(header_line, devices, gpu_columns, affinity, rows)
