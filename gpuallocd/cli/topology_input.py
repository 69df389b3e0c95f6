"""A topology named on the command line (`plan`, `simulate`, `policy-bench`, `topology
--from`): a file, `example:NAME` or a recorded machine. One that cannot be used is the
command line's mistake (exit 2, docs/cli.md), not a failure of the node."""

from __future__ import annotations

from gpuallocd.errors import InputFileError, InventoryError
from gpuallocd.model import Topology
from gpuallocd.topology import load_topology

__all__ = ["RECORDINGS", "topology_argument"]

RECORDINGS = ("nvml-recording:", "amd-recording:")


def topology_argument(spec: str) -> Topology:
    """The topology `spec` names: a file path, `example:NAME`, or `nvml-recording:NAME` /
    `amd-recording:NAME` as `gpuallocd --inventory` takes them (MIG instances included)."""
    try:
        if spec.startswith(RECORDINGS):
            return _recorded(spec)
        return load_topology(spec)
    except InventoryError as exc:
        raise InputFileError(exc.message) from None


def _recorded(spec: str) -> Topology:
    from gpuallocd.inventory import open_inventory

    inventory = open_inventory(spec)
    try:
        return inventory.topology()
    finally:
        inventory.close()
