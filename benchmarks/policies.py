"""How long the default policy takes to choose, on the benchmark's node and a DGX H100.

The daemon keeps one instance per policy, so the time that counts is the instance's second
and later calls over a snapshot like the last one; a fresh instance's first call is shown
too (what `gpuallocctl policy-bench` reports).
"""

from __future__ import annotations

import statistics
import time

from gpuallocd.policies import get_policy
from gpuallocd.policies.base import AllocationRequest, NodeSnapshot
from gpuallocd.topology import load_topology

__all__ = ["policy_rows"]

POLICY = "best-effort"
CASES = (("example:synthetic-32gpu", 1), ("example:synthetic-32gpu", 8), ("example:dgx-h100", 2))


def _median_us(policy_name: str, snapshot: NodeSnapshot, count: int, fresh: bool) -> float:
    request = AllocationRequest(count=count)
    policy = get_policy(policy_name)
    policy.choose(snapshot, request)
    times = []
    for _ in range(200):
        if fresh:
            policy = get_policy(policy_name)
        started = time.perf_counter()
        policy.choose(snapshot, request)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def policy_rows() -> list[tuple[str, float, float]]:
    """(case, µs per call of a kept instance, µs of a fresh instance's call) per case."""
    rows = []
    for spec, count in CASES:
        topology = load_topology(spec)
        snapshot = NodeSnapshot.from_busy(topology)
        name = f"{POLICY} {spec.removeprefix('example:')} n={count}"
        rows.append(
            (
                name,
                _median_us(POLICY, snapshot, count, False),
                _median_us(POLICY, snapshot, count, True),
            )
        )
    return rows
