"""The allocator: the one object that decides and records leases.

Every call runs on the daemon's single writer thread, so a decision and its record are
never interleaved with another. The flow of a grant: expire what is due, build an immutable
snapshot of the node, ask the policy, record the lease in one ledger transaction, and only
then update the in-memory view and answer.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuallocd.errors import (
    CountExceedsNode,
    InternalError,
    InvalidRequest,
    LeaseNotActive,
    PermissionDenied,
    UnknownGpu,
    UnknownLease,
)
from gpuallocd.leases import Caller, HistoryEvent, Lease, LeasedGpu, LeaseState
from gpuallocd.ledger import Ledger
from gpuallocd.liveness import process_start_time
from gpuallocd.model import HEALTHY, Gpu, LiveState, Topology
from gpuallocd.policies import AllocationRequest, Choice, NodeSnapshot, Policy, get_policy

log = logging.getLogger(__name__)

__all__ = ["AllocateSpec", "Allocator", "GpuStatus", "ServiceSettings"]

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    default_policy: str = "best-effort"
    default_ttl_seconds: float = 3600.0
    max_ttl_seconds: float = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class AllocateSpec:
    """A validated allocation request: `count` GPUs in all, `gpus` (UUIDs or indices) among them."""

    count: int | None = None
    gpus: tuple[str | int, ...] = ()
    policy: str | None = None
    ttl_seconds: float | None = None
    label: str | None = None
    min_free_memory_bytes: int | None = None
    bind_to_process: bool = False


@dataclass(frozen=True, slots=True)
class GpuStatus:
    gpu: Gpu
    live: LiveState
    lease: Lease | None
    foreign_pids: tuple[int, ...] = field(default=())

    @property
    def state(self) -> str:
        if not self.live.healthy:
            return "unhealthy"
        if self.lease is not None:
            return "leased"
        return "in-use" if self.foreign_pids else "free"

    def to_json(self) -> dict[str, object]:
        lease = self.lease
        return {
            "index": self.gpu.index,
            "uuid": self.gpu.uuid,
            "name": self.gpu.name,
            "pci_bus_id": self.gpu.pci_bus_id,
            "memory_total_bytes": self.gpu.memory_total_bytes,
            "memory_used_bytes": self.live.memory_used_bytes,
            "utilization_percent": self.live.utilization_percent,
            "numa_node": self.gpu.numa_node,
            "state": self.state,
            "healthy": self.live.healthy,
            "health_reason": self.live.health_reason,
            "foreign_pids": list(self.foreign_pids),
            "lease_id": lease.id if lease else None,
            "holder": {"uid": lease.owner_uid, "user": lease.owner_name} if lease else None,
            "expires_at": lease.expires_at if lease else None,
        }


def _new_lease_id() -> str:
    return secrets.token_hex(6)


class Allocator:
    """Grants, renews, frees, revokes and expires leases over one node."""

    def __init__(
        self,
        ledger: Ledger,
        topology: Topology,
        *,
        clock: Clock,
        settings: ServiceSettings = ServiceSettings(),
        start_time_of: Callable[[int], int | None] = process_start_time,
    ) -> None:
        self._ledger = ledger
        self._clock = clock
        self._start_time_of = start_time_of
        self._settings = settings
        self._policies: dict[str, Policy] = {}
        self._live: dict[str, LiveState] = {}
        self._active: dict[str, Lease] = {}
        self.set_topology(topology)
        self._active = {lease.id: lease for lease in ledger.active_leases()}
        get_policy(settings.default_policy)  # fail at start, not at the first request

    # Node -----------------------------------------------------------------------------------

    @property
    def topology(self) -> Topology:
        return self._topology

    def set_topology(self, topology: Topology) -> None:
        """Adopt a (re)discovered topology and record its GPUs."""
        self._ledger.sync_gpus(topology.gpus, self._clock())
        self._topology = topology
        self._by_uuid = topology.by_uuid()
        self._by_index = topology.by_index()

    def update_live(self, states: Mapping[str, LiveState]) -> None:
        self._live = dict(states)

    def reload(self) -> None:
        """Forget the in-memory view and read it again from the ledger (after a failed commit)."""
        self._active = {lease.id: lease for lease in self._ledger.active_leases()}

    # Queries --------------------------------------------------------------------------------

    def leases(self) -> list[Lease]:
        self.expire_due()
        return sorted(self._active.values(), key=lambda lease: lease.created_at)

    def lease(self, lease_id: str) -> Lease:
        active = self._active.get(lease_id)
        if active is not None:
            return active
        found = self._ledger.lease(lease_id)
        if found is None:
            raise UnknownLease(f"no lease {lease_id!r}", lease=lease_id)
        return found

    def gpu_status(self) -> list[GpuStatus]:
        self.expire_due()
        holders = self._holders()
        return [
            GpuStatus(
                gpu=gpu,
                live=self._live.get(gpu.uuid, HEALTHY),
                lease=holders.get(gpu.uuid),
                foreign_pids=self._foreign_pids(gpu.uuid, holders.get(gpu.uuid)),
            )
            for gpu in self._topology.gpus
        ]

    def history(self, lease_id: str | None = None, limit: int = 100) -> list[HistoryEvent]:
        return self._ledger.history(lease_id, limit)

    # Changes --------------------------------------------------------------------------------

    def allocate(
        self, caller: Caller, spec: AllocateSpec, *, reserved: frozenset[str] = frozenset()
    ) -> Lease:
        """Grant a lease now, or raise (GpusUnavailable, GpuBusy, ...) and change nothing.

        `reserved` GPUs are held for earlier waiters: this request may not take them.
        """
        self.expire_due()
        request = self._request(spec)
        policy_name = spec.policy or self._settings.default_policy
        snapshot = self._snapshot(reserved)
        choice = self._policy(policy_name).choose(snapshot, request)
        _check_choice(choice, request, snapshot)
        if not choice.exact:
            log.warning(
                "policy %s gave a set it could not prove best: %s", policy_name, choice.reason
            )
        start_time = self._start_time_of(caller.pid) if spec.bind_to_process else None
        if spec.bind_to_process and start_time is None:
            raise InvalidRequest("the requesting process is gone; nothing to bind the lease to")
        now = self._clock()
        lease = Lease(
            id=_new_lease_id(),
            gpus=tuple(LeasedGpu(u, self._by_uuid[u].index) for u in choice.gpus),
            owner_uid=caller.uid,
            owner_name=caller.user,
            pid=caller.pid,
            label=spec.label,
            policy=policy_name,
            created_at=now,
            expires_at=now + self._ttl(spec.ttl_seconds),
            bound=spec.bind_to_process,
            pid_start_time=start_time,
        )
        self._ledger.grant(lease, caller.uid)
        self._active[lease.id] = lease
        return lease

    def renew(self, caller: Caller, lease_id: str, ttl_seconds: float | None = None) -> Lease:
        lease = self._owned_active(caller, lease_id)
        now = self._clock()
        renewed = replace(lease, expires_at=now + self._ttl(ttl_seconds))
        self._ledger.renew(lease.id, renewed.expires_at, caller.uid, now)
        self._active[lease.id] = renewed
        return renewed

    def free(self, caller: Caller, lease_id: str) -> Lease:
        lease = self._owned_active(caller, lease_id)
        return self._end([lease], LeaseState.FREED, caller.uid)[0]

    def revoke(self, caller: Caller, lease_id: str, reason: str | None = None) -> Lease:
        if not caller.is_root:
            raise PermissionDenied("only root may revoke leases", lease=lease_id)
        lease = self._active_lease(lease_id)
        return self._end([lease], LeaseState.REVOKED, caller.uid, reason)[0]

    def end_for_exited_process(self, lease_ids: Sequence[str]) -> list[Lease]:
        """End the bound leases whose holder process exited (those still active)."""
        leases = [self._active[i] for i in lease_ids if i in self._active]
        ended: list[Lease] = []
        for lease in leases:
            detail = f"holder process {lease.pid} exited"
            ended += self._end([lease], LeaseState.FREED, actor_uid=0, detail=detail)
        return ended

    def reconcile_processes(self) -> list[Lease]:
        """At start: end bound leases whose process died while the daemon was down."""
        dead = [
            lease.id
            for lease in self._active.values()
            if lease.bound
            and (lease.pid is None or self._start_time_of(lease.pid) != lease.pid_start_time)
        ]
        return self.end_for_exited_process(dead)

    def bound_leases(self) -> list[Lease]:
        return [lease for lease in self._active.values() if lease.bound]

    def expire_due(self) -> list[Lease]:
        """End every lease whose TTL ran out; their GPUs are free again."""
        now = self._clock()
        due = [lease for lease in self._active.values() if lease.expires_at <= now]
        return self._end(due, LeaseState.EXPIRED, actor_uid=0)

    # Internals ------------------------------------------------------------------------------

    def _end(
        self, leases: Sequence[Lease], state: LeaseState, actor_uid: int, detail: str | None = None
    ) -> list[Lease]:
        now = self._clock()
        ended = [lease.ended(state, now) for lease in leases]
        self._ledger.end(ended, actor_uid, detail)
        for lease in ended:
            self._active.pop(lease.id, None)
        return ended

    def _active_lease(self, lease_id: str) -> Lease:
        lease = self._active.get(lease_id)
        if lease is not None and lease.expires_at <= self._clock():
            self.expire_due()
            lease = None
        if lease is None:
            ended = self.lease(lease_id)  # UnknownLease when it never existed
            raise LeaseNotActive(
                f"lease {lease_id} is {ended.state.value}", lease=lease_id, state=ended.state.value
            )
        return lease

    def _owned_active(self, caller: Caller, lease_id: str) -> Lease:
        lease = self._active_lease(lease_id)
        if lease.owner_uid != caller.uid and not caller.is_root:
            raise PermissionDenied(
                f"lease {lease_id} belongs to {lease.owner_name}", lease=lease_id
            )
        return lease

    def _ttl(self, requested: float | None) -> float:
        ttl = self._settings.default_ttl_seconds if requested is None else requested
        if ttl <= 0:
            raise InvalidRequest("ttl_seconds must be positive", ttl_seconds=ttl)
        if ttl > self._settings.max_ttl_seconds:
            raise InvalidRequest(
                f"ttl_seconds may be at most {self._settings.max_ttl_seconds:g}", ttl_seconds=ttl
            )
        return ttl

    def _policy(self, name: str) -> Policy:
        if name not in self._policies:
            self._policies[name] = get_policy(name)
        return self._policies[name]

    def _known_uuid(self, ref: str | int) -> str | None:
        try:
            return self._resolve_gpu(ref)
        except UnknownGpu:
            return None

    def _resolve_gpu(self, ref: str | int) -> str:
        if isinstance(ref, int) and ref in self._by_index:
            return self._by_index[ref].uuid
        if isinstance(ref, str) and ref in self._by_uuid:
            return ref
        if isinstance(ref, str) and ref.isdigit() and int(ref) in self._by_index:
            return self._by_index[int(ref)].uuid
        raise UnknownGpu(f"no GPU {ref!r} on this node", gpu=ref)

    def _request(self, spec: AllocateSpec) -> AllocationRequest:
        required = tuple(self._resolve_gpu(ref) for ref in spec.gpus)
        if len(set(required)) != len(required):
            raise InvalidRequest("a GPU is named twice", gpus=list(spec.gpus))
        count = len(required) if spec.count is None else spec.count
        if count <= 0:
            raise InvalidRequest("count must be at least 1", count=count)
        if count > len(self._topology.gpus):
            raise CountExceedsNode(
                f"{count} GPUs asked for; this node has {len(self._topology.gpus)}",
                count=count,
                node_gpus=len(self._topology.gpus),
            )
        if count < len(required):
            raise InvalidRequest("count is smaller than the number of GPUs named", count=count)
        return AllocationRequest(
            count=count, required=required, min_free_memory_bytes=spec.min_free_memory_bytes
        )

    def _holders(self) -> dict[str, Lease]:
        return {uuid: lease for lease in self._active.values() for uuid in lease.uuids}

    def _foreign_pids(self, uuid: str, holder: Lease | None) -> tuple[int, ...]:
        """Processes on a GPU whose user holds no lease on it."""
        processes = self._live.get(uuid, HEALTHY).processes
        allowed = {holder.owner_uid} if holder else set()
        # A process whose owner cannot be read (another PID namespace) counts against a free GPU
        # only: on a leased GPU it is most likely the holder's own job in a container.
        return tuple(
            p.pid
            for p in processes
            if (p.uid is None and holder is None) or (p.uid is not None and p.uid not in allowed)
        )

    def usable_gpus(self, spec: AllocateSpec) -> frozenset[str]:
        """Every GPU that could serve this request: the named ones, or any when it has a count."""
        known = (self._known_uuid(ref) for ref in spec.gpus)
        required = frozenset(uuid for uuid in known if uuid is not None)
        if spec.count is None or spec.count <= len(required):
            return required
        return frozenset(self._by_uuid)

    def _snapshot(self, reserved: frozenset[str] = frozenset()) -> NodeSnapshot:
        holders = self._holders()
        foreign = frozenset(u for u in self._by_uuid if self._foreign_pids(u, holders.get(u)))
        return NodeSnapshot.from_busy(
            self._topology, busy=frozenset(holders) | reserved, live=self._live, foreign=foreign
        )


def _check_choice(choice: Choice, request: AllocationRequest, snapshot: NodeSnapshot) -> None:
    """A policy is code we may not own: never record a choice that breaks the rules."""
    picked = choice.gpus
    broken = (
        len(picked) != request.count
        or len(set(picked)) != len(picked)
        or not set(request.required) <= set(picked)
        or any(u not in snapshot.views or not snapshot.views[u].free for u in picked)
    )
    if broken:
        raise InternalError("the policy returned an invalid choice", gpus=list(picked))
