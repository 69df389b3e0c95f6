"""Topology files on disk and the examples bundled with the package."""

from __future__ import annotations

import difflib
import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from gpuallocd.errors import InventoryError
from gpuallocd.model import Topology
from gpuallocd.topology.amd_text import is_amd_text, parse_amd_topo
from gpuallocd.topology.json_format import topology_from_json
from gpuallocd.topology.smi_text import parse_smi_topo

if TYPE_CHECKING:
    from importlib.abc import Traversable

__all__ = ["EXAMPLE_PREFIX", "example_names", "load_topology", "parse_topology"]

EXAMPLE_PREFIX = "example:"
_SUFFIXES = (".json", ".txt")


def _examples() -> Traversable:
    return resources.files("gpuallocd") / "examples"


def example_names() -> list[str]:
    """The names of the bundled example topologies (`example:NAME`)."""
    return sorted(
        entry.name.rsplit(".", 1)[0]
        for entry in _examples().iterdir()
        if entry.name.endswith(_SUFFIXES)
    )


def parse_topology(text: str, *, name: str) -> Topology:
    """Any accepted format: JSON when the text is a JSON object; `rocm-smi --showtopo` or
    `amd-smi topology` text where it has their tables; else `nvidia-smi topo -m` text."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InventoryError(f"topology {name}: invalid JSON: {exc}") from None
        return topology_from_json(data, name=name)
    try:
        if is_amd_text(text):
            return parse_amd_topo(text, name=name)
        return parse_smi_topo(text, name=name)
    except InventoryError as exc:
        raise InventoryError(f"topology {name}: {exc.message}", **exc.details) from None


def _read_example(name: str) -> str:
    for suffix in _SUFFIXES:
        entry = _examples() / f"{name}{suffix}"
        if entry.is_file():
            return entry.read_text(encoding="utf-8")
    known = ", ".join(example_names())
    close = difflib.get_close_matches(name, example_names(), n=1)
    hint = f"did you mean `{EXAMPLE_PREFIX}{close[0]}`? " if close else ""
    raise InventoryError(f"no bundled example topology {name!r}; {hint}known: {known}")


def _example_hint(spec: str) -> str:
    """`; did you mean example:NAME?` where a missing file is named like a bundled example."""
    if "/" in spec:
        return ""
    stem = spec.rsplit(".", 1)[0] if spec.endswith(_SUFFIXES) else spec
    if stem in example_names():
        return f"; did you mean `{EXAMPLE_PREFIX}{stem}` (a bundled example)?"
    return ""


def load_topology(spec: str | Path) -> Topology:
    """A topology from a file path, or from a bundled example named `example:NAME`."""
    text_spec = str(spec)
    if text_spec.startswith(EXAMPLE_PREFIX):
        name = text_spec[len(EXAMPLE_PREFIX) :]
        return parse_topology(_read_example(name), name=name)
    path = Path(spec)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InventoryError(
            f"cannot read topology file {path}: {exc.strerror}{_example_hint(text_spec)}"
        ) from None
    return parse_topology(text, name=path.stem)
