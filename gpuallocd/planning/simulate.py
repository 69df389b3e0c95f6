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
from gpuallocd.planning.slice_plans import (
    UnitBook,
    share_fragmentation,
    slice_fragmentation,
    unit_request,
)
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
    share_fragmentation: float = 0.0  # mean over the steps (planning.units)
    slice_fragmentation: float = 0.0

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
        self.units = UnitBook(topology)
        self.share_total = self.slice_total = 0.0
        self.unit_grants = 0  # slices and shares: counted in `grants`, not in the scores

    def apply(self, op: TraceOp) -> Step:
        step = self._allocate(op) if op.op == "allocate" else self._free(op)
        fragmentation = self.quality.fragmentation()
        self.steps += 1
        self.fragmentation_total += fragmentation
        self.fragmentation_max = max(self.fragmentation_max, fragmentation)
        units = self.units.snapshot(self._snapshot())
        self.share_total += share_fragmentation(units)
        self.slice_total += slice_fragmentation(units)
        return step

    def _allocate(self, op: TraceOp) -> Step:
        if op.memory_bytes is not None or op.mig_profile is not None:
            return self._allocate_units(op)
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
        self._check_new(op.id)
        request = request_for(self.topology, op.total, op.gpus or ())
        snapshot = self._snapshot()
        choice = self.policy.choose(snapshot, request)
        check_choice(self.policy.name, choice, request, snapshot)
        uuids = tuple(sorted(choice.gpus, key=self.index.__getitem__))
        self.leases[op.id] = uuids
        self.busy.update(uuids)
        self.quality.take(self.matrix.position[u] for u in uuids)
        return uuids

    def _check_new(self, lease: str) -> None:
        if lease in self.leases or self.units.holds(lease):
            raise InvalidRequest(f"lease {lease} is active already")

    def _allocate_units(self, op: TraceOp) -> Step:
        """Slices or shares, placed as the daemon places them; GPUs with shares turn busy."""
        try:
            self._check_new(op.id)
            required = self.topology.resolve_all(op.gpus or ())
            request = unit_request(
                self.topology, op.total, required, op.memory_bytes, op.mig_profile
            )
            choice = self.units.place(self.units.snapshot(self._snapshot()), request)
        except GpuallocError as exc:
            self.refusals += 1
            return Step(op="allocate", id=op.id, gpus=None, error=exc.message)
        self.units.take(op.id, request, choice.gpus)
        self._sync_share_busy()
        self.unit_grants += 1
        return Step(op="allocate", id=op.id, gpus=self.units.parent_indices(choice.gpus))

    def _sync_share_busy(self) -> None:
        """GPUs holding shares are busy for whole leases; those whose last share left are not."""
        whole = {u for uuids in self.leases.values() for u in uuids}
        shared = self.units.busy_gpus()
        fresh = [u for u in shared if u not in self.busy]
        gone = [u for u in self.busy if u not in shared and u not in whole]
        self.busy.update(fresh)
        self.quality.take(self.matrix.position[u] for u in fresh)
        self.busy.difference_update(gone)
        self.quality.give_back(self.matrix.position[u] for u in gone)

    def _snapshot(self) -> NodeSnapshot:
        busy, views = self.busy, self.views
        return NodeSnapshot(
            topology=self.topology, views={u: views[u in busy][u] for u in self.index}
        )

    def _free(self, op: TraceOp) -> Step:
        held = self.units.give_back(op.id)
        if held:
            self.frees += 1
            self._sync_share_busy()
            return Step(op="free", id=op.id, gpus=self.units.parent_indices(held))
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
            grants=grants + self.unit_grants,
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
            active_leases=len(self.leases) + len(self.units.instances) + len(self.units.shares),
            share_fragmentation=self.share_total / self.steps if self.steps else 0.0,
            slice_fragmentation=self.slice_total / self.steps if self.steps else 0.0,
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
