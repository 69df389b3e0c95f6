"""An inventory read from a topology file: for machines without GPUs, and for replay."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gpuallocd.model import LiveState, Topology
from gpuallocd.topology import example_names, load_topology

__all__ = ["FileInventory", "bundled_examples"]


def bundled_examples() -> list[str]:
    """The bundled example topologies, each served by `--inventory example:NAME`."""
    return example_names()


class FileInventory:
    """The GPUs of a topology file; they are always healthy and nothing runs on them."""

    def __init__(self, spec: str | Path) -> None:
        self._spec = spec
        self._topology = load_topology(spec)

    def topology(self) -> Topology:
        return self._topology

    def rescan(self) -> Topology:
        self._topology = load_topology(self._spec)
        return self._topology

    def sample(self) -> Mapping[str, LiveState]:
        return {}

    def close(self) -> None:
        return None
