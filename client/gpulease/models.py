"""What the daemon answers, as small read-only objects.

They are frozen dataclasses (`dataclasses.replace`, `asdict` and `fields` work on them), with
`__init__`, `__eq__`, `__hash__` and `__repr__` written out here: generating those makes
`@dataclass` compile code at import time, about a millisecond per class, paid by every
`gpuallocctl run` and every `import gpulease`. They behave as the generated ones do.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["GpuStatus", "Lease", "LeasedGpu"]


class _Value:
    """Equality, hash and repr over a dataclass's fields, as `@dataclass(frozen=True)` makes
    them: equal only to the same class, over the fields with `compare`; repr of `repr` fields."""

    __slots__ = ()

    def _compared(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in fields(self) if f.compare)  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, _Value)
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash(self._compared())

    def __repr__(self) -> str:
        shown = (f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)  # type: ignore[arg-type]
        return f"{type(self).__qualname__}({', '.join(shown)})"


def _assign(instance: object, **values: Any) -> None:
    """Set the fields of a frozen instance (what a generated `__init__` does)."""
    for name, value in values.items():
        object.__setattr__(instance, name, value)


@dataclass(frozen=True, init=False, repr=False, eq=False)
class LeasedGpu(_Value):
    """One leased unit: a whole GPU, a MIG instance (`kind` "mig", its GPU in
    `parent_uuid`) or a memory share (`kind` "share", its size in `memory_bytes`)."""

    index: int
    uuid: str
    kind: str = "whole"
    parent_uuid: str | None = None
    memory_bytes: int | None = None
    mig_profile: str | None = None
    fraction: float = 1.0

    def __init__(
        self,
        index: int,
        uuid: str,
        kind: str = "whole",
        parent_uuid: str | None = None,
        memory_bytes: int | None = None,
        mig_profile: str | None = None,
        fraction: float = 1.0,
    ) -> None:
        _assign(
            self,
            index=index,
            uuid=uuid,
            kind=kind,
            parent_uuid=parent_uuid,
            memory_bytes=memory_bytes,
            mig_profile=mig_profile,
            fraction=fraction,
        )

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


@dataclass(frozen=True, init=False, repr=False, eq=False)
class Lease(_Value):
    """A lease as the daemon reported it; `raw` is that answer (not compared, not shown)."""

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

    def __init__(
        self,
        id: str,
        gpus: tuple[LeasedGpu, ...],
        state: str,
        owner_uid: int,
        user: str,
        pid: int | None,
        label: str | None,
        policy: str,
        created_at: float,
        expires_at: float,
        raw: dict[str, Any] | None = None,
    ) -> None:
        _assign(
            self,
            id=id,
            gpus=gpus,
            state=state,
            owner_uid=owner_uid,
            user=user,
            pid=pid,
            label=label,
            policy=policy,
            created_at=created_at,
            expires_at=expires_at,
            raw={} if raw is None else raw,
        )

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
    def preempt_requested(self) -> bool:
        """Whether the daemon had warned, as of this answer, that the lease is preempted
        (docs/preemption.md); a `gpu_lease` block's lease turns True the moment it is."""
        found = self.raw.get("preemption")
        return isinstance(found, dict) and found.get("state") in ("warned", "signalled")

    @property
    def memory_bytes(self) -> int | None:
        """The size of each memory share of this lease; None for whole GPUs and instances."""
        sizes = [g.memory_bytes for g in self.gpus if g.memory_bytes is not None]
        return min(sizes) if sizes else None


@dataclass(frozen=True, init=False, repr=False, eq=False)
class GpuStatus(_Value):
    """One GPU as `status` lists it; `raw` is the daemon's answer (not compared, not shown)."""

    index: int
    uuid: str
    name: str
    state: str
    lease_id: str | None
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    def __init__(
        self,
        index: int,
        uuid: str,
        name: str,
        state: str,
        lease_id: str | None,
        raw: dict[str, Any] | None = None,
    ) -> None:
        _assign(
            self,
            index=index,
            uuid=uuid,
            name=name,
            state=state,
            lease_id=lease_id,
            raw={} if raw is None else raw,
        )

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
