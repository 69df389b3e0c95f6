"""Which GPUs a waiter could ever get, and the refusal of a wait that could never end.

A waiter's own leases never count among the GPUs it waits for: holding 1 GPU and waiting for
all 8 could only end when the waiter frees its own, so such a wait is refused at once
(`would_wait_forever`) and never reserves the GPUs it could not use. Root is the exception:
root may revoke any lease, so it may queue behind its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpuallocd.allocator.leases.node_view import NodeView
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.errors import WouldWaitForever
from gpuallocd.model import Caller, Lease

__all__ = ["KeptFrom", "check_servable", "held_by", "usable_gpus"]


def held_by(leases: Iterable[Lease], uid: int) -> frozenset[str]:
    """The GPUs `uid`'s own leases hold; none for root."""
    if uid == 0:
        return frozenset()
    return frozenset(uuid for lease in leases if lease.owner_uid == uid for uuid in lease.uuids)


class KeptFrom:
    """What `usable_gpus` takes off for the owner of a request, for many waiters at one
    moment: the GPUs the owner holds (`held`), and those `reserved(uid, spec)` keeps from it
    (advance reservations, for the TTL its request would get); each looked up once per owner
    and TTL asked for."""

    def __init__(
        self,
        leases: Iterable[Lease],
        reserved: Callable[[int, AllocateSpec], frozenset[str]],
    ) -> None:
        self._leases = list(leases)
        self._reserved = reserved
        self._held: dict[int, frozenset[str]] = {}
        self._kept: dict[tuple[int, float | None], frozenset[str]] = {}

    def held(self, uid: int) -> frozenset[str]:
        """The GPUs `uid` holds (none for root): kept from every request of its."""
        if uid not in self._held:
            self._held[uid] = held_by(self._leases, uid)
        return self._held[uid]

    def __call__(self, uid: int, spec: AllocateSpec) -> frozenset[str]:
        key = (uid, spec.ttl_seconds)
        if key not in self._kept:
            self._kept[key] = self.held(uid) | self._reserved(uid, spec)
        return self._kept[key]


def usable_gpus(
    node: NodeView, leases: Iterable[Lease], spec: AllocateSpec, owner_uid: int | None = None
) -> frozenset[str]:
    """The GPUs that could serve `spec`, less those its owner holds already."""
    usable = node.usable_gpus(spec)
    return usable if owner_uid is None else usable - held_by(leases, owner_uid)


def check_servable(
    node: NodeView, leases: Iterable[Lease], caller: Caller, spec: AllocateSpec
) -> None:
    """Refuse a wait that the caller's own leases would make endless."""
    leases = list(leases)
    held = held_by(leases, caller.uid)
    named = node.usable_gpus(AllocateSpec(gpus=spec.gpus)) if spec.gpus else frozenset()
    needed = max(spec.count or 0, len(named))
    wanted = AllocateSpec(count=needed, gpus=spec.gpus)
    left = len(usable_gpus(node, leases, wanted, caller.uid))
    if named & held or needed > left:
        raise WouldWaitForever(
            f"you hold {len(held)} of this node's {len(node.topology.gpus)} GPUs, so "
            f"a wait for {needed} could only end when you free yours; free them first",
            count=needed,
            held=len(held),
        )
