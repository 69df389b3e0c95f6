"""Rows of the ledger's tables to and from the model's values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuallocd.model import Gpu
from gpuallocd.model.lease import HistoryEvent, Lease, LeasedGpu, LeaseEvent, LeaseState, UnitKind
from gpuallocd.model.preemption import PreemptTerms

__all__ = [
    "event_from_row",
    "lease_from_row",
    "lease_gpu_rows",
    "lease_row",
    "leased_gpu_from_row",
    "unit_rows",
]


def unit_rows(gpus: Sequence[Gpu], share_capacity: Mapping[str, int]) -> list[dict[str, Any]]:
    """A row per leasable unit: each GPU, and each MIG instance of a GPU in MIG mode."""
    rows = []
    for gpu in gpus:
        rows.append(
            {
                "uuid": gpu.uuid,
                "gpu_index": gpu.index,
                "name": gpu.name,
                "parent_uuid": None,
                "share_capacity_bytes": share_capacity.get(gpu.uuid),
            }
        )
        for mig in gpu.mig_devices if gpu.mig_mode else ():
            rows.append(
                {
                    "uuid": mig.uuid,
                    "gpu_index": gpu.index,
                    "name": f"{gpu.name} MIG {mig.profile or '?'}",
                    "parent_uuid": gpu.uuid,
                    "share_capacity_bytes": None,
                }
            )
    return rows


def lease_row(lease: Lease) -> dict[str, Any]:
    return {
        "id": lease.id,
        "owner_uid": lease.owner_uid,
        "owner_name": lease.owner_name,
        "pid": lease.pid,
        "label": lease.label,
        "policy": lease.policy,
        "created_at": lease.created_at,
        "expires_at": lease.expires_at,
        "state": lease.state.value,
        "ended_at": lease.ended_at,
        "bound": lease.bound,
        "pid_start_time": lease.pid_start_time,
        "waited_seconds": lease.waited_seconds,
        "on_revoke": lease.on_revoke,
        "follow_work": lease.follow_work,
    }


def lease_gpu_rows(lease: Lease) -> list[dict[str, Any]]:
    return [
        {
            "lease_id": lease.id,
            "gpu_uuid": g.uuid,
            "gpu_index": g.index,
            "position": i,
            "active": True,
            "kind": g.kind.value,
            "gpu_of": g.gpu_uuid,
            "memory_bytes": g.memory_bytes,
            "profile": g.profile,
            "fraction": g.fraction,
        }
        for i, g in enumerate(lease.gpus)
    ]


def leased_gpu_from_row(row: Any) -> LeasedGpu:
    parent = row["gpu_of"] if row["gpu_of"] not in (None, row["gpu_uuid"]) else None
    return LeasedGpu(
        uuid=row["gpu_uuid"],
        index=row["gpu_index"],
        kind=UnitKind(row["kind"]),
        parent=parent,
        memory_bytes=row["memory_bytes"],
        profile=row["profile"],
        fraction=row["fraction"],
    )


def lease_from_row(
    row: Any, gpus: tuple[LeasedGpu, ...], preemptible: PreemptTerms | None = None
) -> Lease:
    return Lease(
        id=row["id"],
        gpus=gpus,
        owner_uid=row["owner_uid"],
        owner_name=row["owner_name"],
        pid=row["pid"],
        label=row["label"],
        policy=row["policy"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        state=LeaseState(row["state"]),
        ended_at=row["ended_at"],
        bound=bool(row["bound"]),
        pid_start_time=row["pid_start_time"],
        waited_seconds=row["waited_seconds"],
        on_revoke=row["on_revoke"],
        preemptible=preemptible,
        follow_work=bool(row["follow_work"]),
    )


def event_from_row(row: Any) -> HistoryEvent:
    return HistoryEvent(
        seq=row["seq"],
        lease_id=row["lease_id"],
        event=LeaseEvent(row["event"]),
        actor_uid=row["actor_uid"],
        at=row["at"],
        detail=row["detail"],
    )
