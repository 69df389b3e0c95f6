"""Reading and writing node topologies: `nvidia-smi topo -m` text and the project's JSON."""

from __future__ import annotations

from gpuallocd.topology.files import example_names, load_topology, parse_topology
from gpuallocd.topology.json_format import topology_from_json, topology_to_json
from gpuallocd.topology.smi_text import parse_smi_topo, render_smi_topo, synthetic_uuid

__all__ = [
    "example_names",
    "load_topology",
    "parse_smi_topo",
    "parse_topology",
    "render_smi_topo",
    "synthetic_uuid",
    "topology_from_json",
    "topology_to_json",
]
