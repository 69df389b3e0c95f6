"""`policy-bench`: how long a policy takes for every request size on a topology.

Each size is timed on an idle node and on a half-busy one (every other GPU leased), with
a fresh policy instance per run so that no memo hides the work.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuallocd.errors import GpuallocError
from gpuallocd.model import Gpu, Link, PcieLevel, Topology, pair_key
from gpuallocd.policies.base import AllocationRequest, Choice, NodeSnapshot, Policy
from gpuallocd.topology.smi_text import synthetic_uuid

__all__ = ["BenchRow", "bench_policy", "random_topology"]

PolicyMaker = Callable[[], Policy]


@dataclass(frozen=True, slots=True)
class BenchRow:
    topology: str
    gpus: int
    state: str
    count: int
    median_ms: float
    max_ms: float
    search_nodes: int | None
    exact: bool
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "topology": self.topology,
            "gpus": self.gpus,
            "state": self.state,
            "count": self.count,
            "median_ms": round(self.median_ms, 3),
            "max_ms": round(self.max_ms, 3),
            "search_nodes": self.search_nodes,
            "exact": self.exact,
            "error": self.error,
        }


def _states(topology: Topology) -> Iterator[tuple[str, frozenset[str]]]:
    yield "idle", frozenset()
    yield "half busy", frozenset(g.uuid for g in topology.gpus[1::2])


def _time_one(make: PolicyMaker, snapshot: NodeSnapshot, count: int) -> tuple[float, Choice]:
    policy = make()
    start = time.perf_counter()
    choice = policy.choose(snapshot, AllocationRequest(count=count))
    return (time.perf_counter() - start) * 1000, choice


def _row(topology: Topology, state: str, count: int, runs: list[tuple[float, Choice]]) -> BenchRow:
    times = [ms for ms, _ in runs]
    choice = runs[-1][1]
    return BenchRow(
        topology=topology.name,
        gpus=len(topology.gpus),
        state=state,
        count=count,
        median_ms=statistics.median(times),
        max_ms=max(times),
        search_nodes=choice.search_nodes,
        exact=choice.exact,
    )


def _refused(topology: Topology, state: str, count: int, error: GpuallocError) -> BenchRow:
    return BenchRow(
        topology=topology.name,
        gpus=len(topology.gpus),
        state=state,
        count=count,
        median_ms=0.0,
        max_ms=0.0,
        search_nodes=None,
        exact=True,
        error=error.message,
    )


def bench_policy(topology: Topology, make: PolicyMaker, *, repeat: int = 3) -> list[BenchRow]:
    """One row per (state, request size) that the free GPUs can hold; refusals say why."""
    rows = []
    for state, busy in _states(topology):
        snapshot = NodeSnapshot.from_busy(topology, busy=busy)
        for count in range(1, len(snapshot.available()) + 1):
            try:
                runs = [_time_one(make, snapshot, count) for _ in range(repeat)]
            except GpuallocError as exc:
                rows.append(_refused(topology, state, count, exc))
            else:
                rows.append(_row(topology, state, count, runs))
    return rows


def random_topology(size: int, seed: int) -> Topology:
    """A topology with no structure to exploit: random NVLink lanes, PCIe levels and NUMA.

    Real nodes are built from switches, pairs and meshes; this is the worst case for the
    search, not a machine anyone sells.
    """
    rng = random.Random(seed)
    gpus = tuple(
        Gpu(uuid=synthetic_uuid(i), index=i, name="random", numa_node=rng.randrange(2))
        for i in range(size)
    )
    links = {
        pair_key(a.uuid, b.uuid): Link(
            nvlinks=rng.choice((0, 0, 1, 2, 4)), pcie=rng.choice(tuple(PcieLevel))
        )
        for i, a in enumerate(gpus)
        for b in gpus[i + 1 :]
    }
    return Topology(name=f"random-{size}gpu-seed{seed}", gpus=gpus, links=links)
