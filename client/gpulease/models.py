"""What the daemon answers, as small read-only objects.

To callers they are frozen dataclasses: `dataclasses.fields`, `replace`, `asdict`, `astuple`
and `is_dataclass` work on them, assigning a field raises FrozenInstanceError, and
`case Lease(id, gpus)` matches by position. They are defined without `@dataclass`, which
would import `dataclasses` and with it `inspect` (about a tenth of a `gpuallocctl run`'s
start) and compile `__init__`, `__eq__`, `__hash__` and `__repr__` at every import: those are
written out here, and the description that `dataclasses` reads (`__dataclass_fields__`) is
made the first time something asks for it (`_Described`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, NoReturn

if TYPE_CHECKING:
    from dataclasses import Field
    from typing import TypeVar

    # Only for the type checker: a TypeVar bound by a string compiles it at import.
    _Model = TypeVar("_Model", bound="type[_Value]")

__all__ = ["GpuStatus", "Lease", "LeasedGpu"]


class _Raw:
    """The default of `raw`, the daemon's whole answer: a new empty dict, neither compared
    nor shown (what `field(repr=False, compare=False, default_factory=dict)` says)."""

    __slots__ = ()


_RAW: Any = _Raw()


class _Value:
    """Equality, hash, repr and immutability as `@dataclass(frozen=True)` makes them: equal
    only to the same class, over the compared fields; repr of the shown fields."""

    __slots__ = ()
    _field_names: ClassVar[tuple[str, ...]]
    _compared_names: ClassVar[tuple[str, ...]]
    _defaults: ClassVar[dict[str, Any]]
    if TYPE_CHECKING:  # what `dataclasses` reads; made on first use (`_Described`)
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def _compared(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._compared_names)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, _Value)
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash(self._compared())

    def __repr__(self) -> str:
        shown = (f"{name}={getattr(self, name)!r}" for name in self._compared_names)
        return f"{type(self).__qualname__}({', '.join(shown)})"

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise _frozen(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise _frozen(f"cannot delete field {name!r}")


def _frozen(message: str) -> Exception:
    from dataclasses import FrozenInstanceError

    return FrozenInstanceError(message)


class _Described:
    """`__dataclass_fields__` or `__dataclass_params__` of a model, made when first read: a
    dataclass with the model's fields is defined then, and its description becomes the
    model's (so `dataclasses` is imported only by those who use it)."""

    def __init__(self, attribute: str) -> None:
        self._attribute = attribute

    def __get__(self, instance: object, owner: type[_Value]) -> Any:
        import dataclasses

        specs = [
            (name, owner.__annotations__[name], _spec(owner, name)) for name in owner._field_names
        ]
        shadow = dataclasses.make_dataclass(
            owner.__name__, specs, frozen=True, init=False, repr=False, eq=False
        )
        for attribute in ("__dataclass_fields__", "__dataclass_params__"):
            type.__setattr__(owner, attribute, getattr(shadow, attribute))
        return getattr(shadow, self._attribute)


def _spec(model: type[_Value], name: str) -> Any:
    """The `dataclasses.field` of one of `model`'s fields."""
    import dataclasses

    if name not in model._compared_names:
        return dataclasses.field(repr=False, compare=False, default_factory=dict)
    if name in model._defaults:
        return dataclasses.field(default=model._defaults[name])
    return dataclasses.field()


def _model(cls: _Model) -> _Model:
    """Record a model's fields (its annotations, in order) as `@dataclass` would."""
    names = tuple(cls.__annotations__)
    raw = tuple(name for name in names if cls.__dict__.get(name) is _RAW)
    for name in raw:
        delattr(cls, name)
    cls._field_names = names
    cls._compared_names = tuple(name for name in names if name not in raw)
    cls._defaults = {name: cls.__dict__[name] for name in names if name in cls.__dict__}
    type.__setattr__(cls, "__match_args__", names)
    for attribute in ("__dataclass_fields__", "__dataclass_params__"):
        type.__setattr__(cls, attribute, _Described(attribute))
    return cls


def _assign(instance: object, **values: Any) -> None:
    """Set the fields of a frozen instance (what a generated `__init__` does)."""
    for name, value in values.items():
        object.__setattr__(instance, name, value)


@_model
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


@_model
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
    raw: dict[str, Any] = _RAW

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


@_model
class GpuStatus(_Value):
    """One GPU as `status` lists it; `raw` is the daemon's answer (not compared, not shown)."""

    index: int
    uuid: str
    name: str
    state: str
    lease_id: str | None
    raw: dict[str, Any] = _RAW

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
