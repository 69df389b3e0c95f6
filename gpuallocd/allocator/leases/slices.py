"""Slices and shares in the lease lifecycle: placing them, and what a lease records of them.

A whole-GPU request goes to the policy it names. A request for MIG instances is placed by
`policies.slices` (one GPU first, then the best-linked GPUs), a memory share by
`policies.shares` (best fit); both choices are checked by `rules.check_unit_choice`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpuallocd.errors import InvalidRequest
from gpuallocd.model import Gpu, Lease, LeasedGpu, Topology, UnitKind
from gpuallocd.policies import AllocationRequest, Choice, NodeSnapshot
from gpuallocd.policies.rules import check_unit_choice
from gpuallocd.policies.shares import choose_shares
from gpuallocd.policies.slices import choose_slices

__all__ = ["PLACEMENT", "leased_units", "place_units", "vanished_units"]

PLACEMENT = {"mig": "best-effort", "share": "best-fit"}
"""The placement that serves each kind of partial request (the lease's `policy`)."""


def place_units(
    snapshot: NodeSnapshot, request: AllocationRequest, policy: str | None
) -> tuple[str, Choice]:
    """The placement's name and its checked choice of instances or shared GPUs."""
    name = PLACEMENT[request.kind]
    if policy is not None and policy != name:
        what = "MIG instances" if request.kind == "mig" else "memory shares"
        raise InvalidRequest(f"{what} are placed by {name}, not {policy}", field="policy")
    chooser = choose_slices if request.kind == "mig" else choose_shares
    choice = chooser(snapshot, request)
    check_unit_choice(choice, request, snapshot)
    return name, choice


def _fraction(part: int | None, whole: int | None) -> float:
    return 1.0 if not part or not whole else min(part / whole, 1.0)


def _partition_fraction(topology: Topology, gpu: Gpu) -> float:
    if gpu.partition_of is None:
        return 1.0
    siblings = sum(1 for g in topology.gpus if g.partition_of == gpu.partition_of)
    return 1.0 / max(siblings, 1)


def leased_units(
    topology: Topology, request: AllocationRequest, uuids: Sequence[str]
) -> tuple[LeasedGpu, ...]:
    """What the lease records for each unit chosen."""
    by_uuid, instances = topology.by_uuid(), topology.instances()
    units = []
    for uuid in uuids:
        if request.kind == "mig":
            gpu, mig = instances[uuid]
            unit = LeasedGpu(
                uuid=uuid,
                index=gpu.index,
                kind=UnitKind.MIG,
                parent=gpu.uuid,
                profile=mig.profile,
                fraction=_fraction(mig.memory_total_bytes, gpu.memory_total_bytes),
            )
        elif request.kind == "share":
            gpu = by_uuid[uuid]
            unit = LeasedGpu(
                uuid=uuid,
                index=gpu.index,
                kind=UnitKind.SHARE,
                memory_bytes=request.memory_bytes,
                fraction=_fraction(request.memory_bytes, gpu.memory_total_bytes),
            )
        else:
            gpu = by_uuid[uuid]
            unit = LeasedGpu(
                uuid=uuid,
                index=gpu.index,
                parent=gpu.partition_of if gpu.partition_of != uuid else None,
                fraction=_partition_fraction(topology, gpu),
            )
        units.append(unit)
    return tuple(units)


def vanished_units(leases: Iterable[Lease], topology: Topology) -> list[tuple[Lease, str]]:
    """Active leases holding a MIG instance the node no longer has, with the reason."""
    instances = topology.instances()
    found = []
    for lease in leases:
        gone = [u.uuid for u in lease.gpus if u.kind is UnitKind.MIG and u.uuid not in instances]
        if gone:
            found.append((lease, f"MIG instance {', '.join(gone)} vanished on rescan"))
    return found
