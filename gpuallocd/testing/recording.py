"""Recorded machines: JSON files that the fake NVML and fake amdsmi replay.

A recording holds what the vendor library answered on one machine, call by call, so the
real backend code runs unchanged over it. Any answer may instead be `{"error": "NAME"}`
(an NVML or amdsmi error name, e.g. `NOT_SUPPORTED`); an answer that is absent reads as
not supported. The format is described in docs/hardware.md.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuallocd.errors import InventoryError

if TYPE_CHECKING:
    from importlib.abc import Traversable

__all__ = [
    "AMD_FORMAT",
    "NVML_FORMAT",
    "load_recording",
    "recording_names",
]

NVML_FORMAT = "gpuallocd-nvml-recording/1"
AMD_FORMAT = "gpuallocd-amdsmi-recording/1"


def _bundled() -> Traversable:
    return resources.files("gpuallocd.testing") / "recordings"


def _format_of(entry: Traversable) -> str | None:
    try:
        data = json.loads(entry.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("format") if isinstance(data, dict) else None


def recording_names(fmt: str = NVML_FORMAT) -> list[str]:
    """The bundled recordings of one format, by name."""
    return sorted(
        entry.name.removesuffix(".json")
        for entry in _bundled().iterdir()
        if entry.name.endswith(".json") and _format_of(entry) == fmt
    )


def _read(spec: str | Path, fmt: str) -> tuple[str, str]:
    text_spec = str(spec)
    bundled = _bundled() / f"{text_spec}.json"
    if "/" not in text_spec and not text_spec.endswith(".json") and bundled.is_file():
        return bundled.read_text(encoding="utf-8"), text_spec
    path = Path(spec)
    if not path.is_file() and "/" not in text_spec and not text_spec.endswith(".json"):
        known = ", ".join(recording_names(fmt)) or "none"
        raise InventoryError(f"no bundled recording {text_spec!r}; known: {known}")
    try:
        return path.read_text(encoding="utf-8"), path.stem
    except OSError as exc:
        raise InventoryError(f"cannot read recording {path}: {exc.strerror}") from None


def load_recording(spec: str | Path, fmt: str = NVML_FORMAT) -> dict[str, Any]:
    """A recording by bundled name (`dgx-a100-mig`) or by path to a JSON file."""
    text, name = _read(spec, fmt)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InventoryError(f"recording {name}: invalid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != fmt:
        found = data.get("format") if isinstance(data, dict) else None
        raise InventoryError(f"recording {name}: expected format {fmt!r}, found {found!r}")
    if not isinstance(data.get("devices"), list):
        raise InventoryError(f"recording {name}: 'devices' must be a list")
    data.setdefault("name", name)
    return data
