"""How good a set of GPUs is: one integer per pair, summed over the pairs of the set.

A pair scores on three tiers, compared in order: the fabric lanes between the two GPUs
(NVLink or AMD XGMI links; every pair on an NVSwitch fabric has the fabric's lane count),
then the PCIe path (PIX 4 points, PXB 3, PHB 2, NODE 1, SYS 0), then whether they share a
NUMA node (1 point). The tiers are packed into one integer with decimal weights:

    pair score = lanes * 10**9 + pcie points * 10**4 + same NUMA node

A set's score is the sum over its pairs. Within a set of up to 141 GPUs the packing is
exactly lexicographic: the NUMA tier adds at most 9,870 (< 10**4) and the PCIe tier at most
39,480 * 10**4 (< 10**9), so one more lane always outweighs any PCIe or NUMA difference,
and one more PCIe point always outweighs any NUMA difference.

`nvidia-smi topo -m` prints `NV#` for NVLink pairs and hides their PCIe path; such a pair
gets NODE when both GPUs are on the same NUMA node (the path stays on one socket) and SYS
otherwise, so that NVLink never makes a pair look worse on the PCIe tier.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from gpuallocd.model import Gpu, Link, PcieLevel, Topology

__all__ = [
    "LANE_WEIGHT",
    "NUMA_WEIGHT",
    "PCIE_WEIGHT",
    "PairScore",
    "SetScore",
    "WeightMatrix",
    "fabric_lanes",
    "pair_breakdown",
    "pair_score",
    "pcie_points",
    "same_numa",
    "set_breakdown",
    "set_score",
    "weight_matrix",
]

LANE_WEIGHT = 10**9
PCIE_WEIGHT = 10**4
NUMA_WEIGHT = 1


def fabric_lanes(link: Link) -> int:
    """NVLink or XGMI links between the two GPUs (a node has one kind or the other)."""
    return link.nvlinks + link.xgmi


def same_numa(a: Gpu, b: Gpu) -> bool:
    return a.numa_node is not None and a.numa_node == b.numa_node


def pcie_points(link: Link, a: Gpu, b: Gpu) -> int:
    """PIX 4 ... SYS 0; an unknown path counts as NODE on one NUMA node, else SYS."""
    if link.pcie is not None:
        return int(link.pcie) - int(PcieLevel.SYS)
    return 1 if same_numa(a, b) else 0


@dataclass(frozen=True, slots=True)
class PairScore:
    """The three tiers of one pair and their packed value."""

    lanes: int
    pcie_points: int
    same_numa: bool

    @property
    def value(self) -> int:
        return (
            self.lanes * LANE_WEIGHT
            + self.pcie_points * PCIE_WEIGHT
            + int(self.same_numa) * NUMA_WEIGHT
        )


def pair_breakdown(link: Link, a: Gpu, b: Gpu) -> PairScore:
    return PairScore(
        lanes=fabric_lanes(link), pcie_points=pcie_points(link, a, b), same_numa=same_numa(a, b)
    )


def pair_score(link: Link, a: Gpu, b: Gpu) -> int:
    """The packed score of one pair (higher is better)."""
    return pair_breakdown(link, a, b).value


@dataclass(frozen=True, slots=True)
class SetScore:
    """The tiers summed over every pair of a set, and the packed value."""

    lanes: int = 0
    pcie_points: int = 0
    numa_pairs: int = 0

    @property
    def value(self) -> int:
        return self.lanes * LANE_WEIGHT + self.pcie_points * PCIE_WEIGHT + self.numa_pairs

    @classmethod
    def unpack(cls, value: int) -> SetScore:
        """The tiers of a packed set score (exact for sets of up to 141 GPUs)."""
        lanes, rest = divmod(value, LANE_WEIGHT)
        pcie, numa = divmod(rest, PCIE_WEIGHT)
        return cls(lanes=lanes, pcie_points=pcie, numa_pairs=numa)

    def plus(self, pair: PairScore) -> SetScore:
        return SetScore(
            lanes=self.lanes + pair.lanes,
            pcie_points=self.pcie_points + pair.pcie_points,
            numa_pairs=self.numa_pairs + int(pair.same_numa),
        )


def set_breakdown(topology: Topology, uuids: Iterable[str]) -> SetScore:
    """The tiers of a set of GPUs, named by UUID."""
    by_uuid = topology.by_uuid()
    gpus = [by_uuid[u] for u in uuids]
    total = SetScore()
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            total = total.plus(pair_breakdown(topology.link(a.uuid, b.uuid), a, b))
    return total


def set_score(topology: Topology, uuids: Iterable[str]) -> int:
    """The packed score of a set of GPUs: the sum of its pair scores."""
    return set_breakdown(topology, uuids).value


@dataclass(frozen=True)
class WeightMatrix:
    """Every pair score of a topology, by position (the GPUs in index order)."""

    topology: Topology
    position: Mapping[str, int]
    weights: Sequence[Sequence[int]]

    def set_value(self, positions: Sequence[int]) -> int:
        rows = self.weights
        return sum(rows[a][b] for i, a in enumerate(positions) for b in positions[i + 1 :])


def weight_matrix(topology: Topology) -> WeightMatrix:
    gpus = topology.gpus
    rows = tuple(
        tuple(0 if a is b else pair_score(topology.link(a.uuid, b.uuid), a, b) for b in gpus)
        for a in gpus
    )
    position = MappingProxyType({g.uuid: i for i, g in enumerate(gpus)})
    return WeightMatrix(topology=topology, position=position, weights=rows)
