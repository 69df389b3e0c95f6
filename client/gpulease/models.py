"""What the daemon answers, as small read-only objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["GpuStatus", "Lease", "LeasedGpu"]


@dataclass(frozen=True)
class LeasedGpu:
    """One leased unit: a whole GPU, a MIG instance (`kind` "mig", its GPU in
    `parent_uuid`) or a memory share (`kind` "share", its size in `memory_bytes`)."""

    index: int
    uuid: str
    kind: str = "whole"
    parent_uuid: str | None = None
    memory_bytes: int | None = None
    mig_profile: str | None = None
    fraction: float = 1.0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LeasedGpu:
        return cls(
            index=data["index"],
            uuid=data["uuid"],
            kind=data.get("kind", "whole"),
            parent_uuid=data.get("parent_uuid"),
            memory_bytes=data.get("memory_bytes"),
            mig_profile=data.get("mig_profile"),
            fraction=data.get("fraction", 1.0),
        )


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
            gpus=tuple(LeasedGpu.from_json(g) for g in data["gpus"]),
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

    @property
    def memory_bytes(self) -> int | None:
        """The size of each memory share of this lease; None for whole GPUs and instances."""
        sizes = [g.memory_bytes for g in self.gpus if g.memory_bytes is not None]
        return min(sizes) if sizes else None


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
