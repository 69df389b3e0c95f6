"""`simulate`: replay a trace of allocations and frees against a policy, offline.

Each operation becomes one step: the GPUs granted or freed (indices), or null and the
error when refused. The summary counts grants and refusals and gives the mean score of
the granted sets and the fragmentation of the free GPUs (see `fragmentation`), averaged
over the state after every step.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from gpuallocd.errors import GpuallocError, InvalidRequest
from gpuallocd.model import Topology
from gpuallocd.planning.fragmentation import FreeSetQuality
from gpuallocd.planning.trace import TraceOp
from gpuallocd.policies.base import GpuView, NodeSnapshot, Policy
from gpuallocd.policies.rules import check_choice, request_for
from gpuallocd.policies.scoring import SetScore, weight_matrix

__all__ = ["Simulation", "Step", "Summary", "simulate"]


@dataclass(frozen=True, slots=True)
class Step:
    op: str
    id: str
    gpus: tuple[int, ...] | None
    error: str | None = None
    score: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "id": self.id,
            "gpus": None if self.gpus is None else list(self.gpus),
            "error": self.error,
            "score": self.score,
        }


@dataclass(frozen=True, slots=True)
class Summary:
    topology: str
    policy: str
    steps: int
    grants: int
    refusals: int
    frees: int
    free_errors: int
    mean_score: float | None
    mean_tiers: dict[str, float] | None
    fragmentation: float
    fragmentation_max: float
    fragmentation_final: float
    active_leases: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Simulation:
    steps: tuple[Step, ...]
    summary: Summary

    def to_json(self) -> dict[str, Any]:
        return {"steps": [s.to_json() for s in self.steps], "summary": self.summary.to_json()}


class _Replay:
    """The node during a replay: who holds what, and running totals."""

    def __init__(self, topology: Topology, policy: Policy) -> None:
        self.topology, self.policy = topology, policy
        self.matrix = weight_matrix(topology)
        self.quality = FreeSetQuality(self.matrix)
        self.leases: dict[str, tuple[str, ...]] = {}
        self.busy: set[str] = set()
        self.index = {g.uuid: g.index for g in topology.gpus}
        self.views = {  # by "is busy": every GPU is healthy and unshared in a replay
            busy: {g.uuid: GpuView(gpu=g, free=not busy) for g in topology.gpus}
            for busy in (False, True)
        }
        self.grants = self.refusals = self.frees = self.free_errors = 0
        self.score_total = 0
        self.tier_totals = SetScore()
        self.fragmentation_total = self.fragmentation_max = 0.0
        self.steps = 0

    def apply(self, op: TraceOp) -> Step:
        step = self._allocate(op) if op.op == "allocate" else self._free(op)
        fragmentation = self.quality.fragmentation()
        self.steps += 1
        self.fragmentation_total += fragmentation
        self.fragmentation_max = max(self.fragmentation_max, fragmentation)
        return step

    def _allocate(self, op: TraceOp) -> Step:
        try:
            uuids = self._grant(op)
        except GpuallocError as exc:
            self.refusals += 1
            return Step(op="allocate", id=op.id, gpus=None, error=exc.message)
        positions = [self.matrix.position[u] for u in uuids]
        score = self.matrix.set_value(positions)
        self.grants += 1
        self.score_total += score
        self.tier_totals = _add(self.tier_totals, SetScore.unpack(score))
        return Step(op="allocate", id=op.id, gpus=tuple(self.index[u] for u in uuids), score=score)

    def _grant(self, op: TraceOp) -> tuple[str, ...]:
        if op.id in self.leases:
            raise InvalidRequest(f"lease {op.id} is active already")
        request = request_for(self.topology, op.total, op.gpus or ())
        snapshot = self._snapshot()
        choice = self.policy.choose(snapshot, request)
        check_choice(self.policy.name, choice, request, snapshot)
        uuids = tuple(sorted(choice.gpus, key=self.index.__getitem__))
        self.leases[op.id] = uuids
        self.busy.update(uuids)
        self.quality.take(self.matrix.position[u] for u in uuids)
        return uuids

    def _snapshot(self) -> NodeSnapshot:
        busy, views = self.busy, self.views
        return NodeSnapshot(
            topology=self.topology, views={u: views[u in busy][u] for u in self.index}
        )

    def _free(self, op: TraceOp) -> Step:
        uuids = self.leases.pop(op.id, None)
        if uuids is None:
            self.free_errors += 1
            return Step(op="free", id=op.id, gpus=None, error=f"no active lease {op.id}")
        self.frees += 1
        self.busy.difference_update(uuids)
        self.quality.give_back(self.matrix.position[u] for u in uuids)
        return Step(op="free", id=op.id, gpus=tuple(self.index[u] for u in uuids))

    def summary(self) -> Summary:
        grants = self.grants
        tiers = self.tier_totals
        return Summary(
            topology=self.topology.name,
            policy=self.policy.name,
            steps=self.steps,
            grants=grants,
            refusals=self.refusals,
            frees=self.frees,
            free_errors=self.free_errors,
            mean_score=self.score_total / grants if grants else None,
            mean_tiers={
                "lanes": tiers.lanes / grants,
                "pcie_points": tiers.pcie_points / grants,
                "numa_pairs": tiers.numa_pairs / grants,
            }
            if grants
            else None,
            fragmentation=self.fragmentation_total / self.steps if self.steps else 0.0,
            fragmentation_max=self.fragmentation_max,
            fragmentation_final=self.quality.fragmentation(),
            active_leases=len(self.leases),
        )


def _add(a: SetScore, b: SetScore) -> SetScore:
    return SetScore(
        lanes=a.lanes + b.lanes,
        pcie_points=a.pcie_points + b.pcie_points,
        numa_pairs=a.numa_pairs + b.numa_pairs,
    )


def simulate(topology: Topology, policy: Policy, ops: Iterable[TraceOp]) -> Simulation:
    """Replay `ops` from an idle node; a refused step changes nothing."""
    replay = _Replay(topology, policy)
    steps = tuple(replay.apply(op) for op in ops)
    return Simulation(steps=steps, summary=replay.summary())
