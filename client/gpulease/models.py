"""What the daemon answers, as small read-only objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["GpuStatus", "Lease", "LeasedGpu"]


@dataclass(frozen=True)
class LeasedGpu:
    index: int
    uuid: str


@dataclass(frozen=True)
class Lease:
    id: str
    gpus: tuple[LeasedGpu, ...]
    state: str
    owner_uid: int
    user: str
    pid: int | None
    label: str | None
    policy: str
    created_at: float
    expires_at: float
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Lease:
        return cls(
            id=data["id"],
            gpus=tuple(LeasedGpu(index=g["index"], uuid=g["uuid"]) for g in data["gpus"]),
            state=data["state"],
            owner_uid=data["owner"]["uid"],
            user=data["owner"]["user"],
            pid=data.get("pid"),
            label=data.get("label"),
            policy=data["policy"],
            created_at=data["created_at"],
            expires_at=data["expires_at"],
            raw=data,
        )

    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(g.uuid for g in self.gpus)

    @property
    def indices(self) -> tuple[int, ...]:
        return tuple(g.index for g in self.gpus)


@dataclass(frozen=True)
class GpuStatus:
    index: int
    uuid: str
    name: str
    state: str
    lease_id: str | None
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GpuStatus:
        return cls(
            index=data["index"],
            uuid=data["uuid"],
            name=data["name"],
            state=data["state"],
            lease_id=data.get("lease_id"),
            raw=data,
        )
