"""The lease lifecycle: grant, renew, free, revoke, expire, and end leases of exited processes.

The one place that decides and records leases. It is synchronous and keeps no lock: the
façade runs every call through the serial worker, one at a time on the event loop, so a
decision and its record are never interleaved with another. The flow of a grant: expire what
is due, check the request, build an immutable snapshot, ask the policy, check its choice,
record the lease in one ledger transaction, and only then update the in-memory view.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from gpuallocd.allocator.deadlines import Deadlines
from gpuallocd.allocator.node_view import GpuStatus, NodeView
from gpuallocd.allocator.specs import AllocateSpec, AllocatorSettings
from gpuallocd.allocator.watcher import process_start_time
from gpuallocd.errors import (
    InvalidRequest,
    LeaseNotActive,
    PermissionDenied,
    UnknownLease,
    WouldWaitForever,
)
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller, HistoryEvent, Lease, LeasedGpu, LeaseState, LiveState, Topology
from gpuallocd.policies import Policy, get_policy
from gpuallocd.policies.rules import check_choice, request_for

log = logging.getLogger(__name__)

__all__ = ["LeaseLifecycle"]

Clock = Callable[[], float]
DEFAULT_SETTINGS = AllocatorSettings()


def _new_lease_id() -> str:
    return secrets.token_hex(6)


class LeaseLifecycle:
    """Grants, renews, frees, revokes and expires leases over one node."""

    def __init__(
        self,
        ledger: Ledger,
        topology: Topology,
        *,
        clock: Clock,
        settings: AllocatorSettings = DEFAULT_SETTINGS,
        start_time_of: Callable[[int], int | None] = process_start_time,
        monotonic: Clock | None = None,
    ) -> None:
        """`clock` gives the wall-clock times shown to people; `monotonic` (the same clock
        when not given) decides expiry: see `deadlines.py`."""
        self._ledger = ledger
        self._clock = clock
        self._deadlines = Deadlines(clock, monotonic or clock, settings.max_ttl_seconds)
        self._by_request: dict[tuple[int, str], str] = {}
        self._start_time_of = start_time_of
        self._settings = settings
        self._policies: dict[str, Policy] = {}
        self.node = NodeView(topology)
        ledger.sync_gpus(topology.gpus, clock())
        self._active = {lease.id: lease for lease in ledger.active_leases()}
        get_policy(settings.default_policy)  # fail at start, not at the first request

    # Node -----------------------------------------------------------------------------------

    @property
    def topology(self) -> Topology:
        return self.node.topology

    def set_topology(self, topology: Topology) -> None:
        """Adopt a (re)discovered topology and record its GPUs."""
        self._ledger.sync_gpus(topology.gpus, self._clock())
        self.node.adopt(topology)

    def update_live(self, states: Mapping[str, LiveState]) -> None:
        self.node.update_live(states)

    def reload(self) -> None:
        """Forget the in-memory view and read it again from the ledger (after a failed commit)."""
        self._active = {lease.id: lease for lease in self._ledger.active_leases()}
        self._by_request = {k: v for k, v in self._by_request.items() if v in self._active}

    # Queries --------------------------------------------------------------------------------

    def leases(self) -> list[Lease]:
        self.expire_due()
        return sorted(self._active.values(), key=lambda lease: lease.created_at)

    def lease(self, lease_id: str) -> Lease:
        active = self._active.get(lease_id)
        if active is not None and not self._deadlines.passed(active):
            return active
        if active is not None:
            self.expire_due()  # never shown active past its deadline
        found = self._ledger.lease(lease_id)
        if found is None:
            raise UnknownLease(f"no lease {lease_id!r}", lease=lease_id)
        return found

    def gpu_status(
        self, reserved: Mapping[str, dict[str, object]] | None = None
    ) -> list[GpuStatus]:
        self.expire_due()
        return self.node.statuses(self._active.values(), reserved)

    def history(self, lease_id: str | None = None, limit: int = 100) -> list[HistoryEvent]:
        return self._ledger.history(lease_id, limit)

    def bound_leases(self) -> list[Lease]:
        return [lease for lease in self._active.values() if lease.bound]

    def usable_gpus(self, spec: AllocateSpec, owner_uid: int | None = None) -> frozenset[str]:
        """The GPUs that could serve `spec`, less those its owner holds already."""
        usable = self.node.usable_gpus(spec)
        return usable if owner_uid is None else usable - self._held_by(owner_uid)

    def check_servable(self, caller: Caller, spec: AllocateSpec) -> None:
        """Refuse a wait that the caller's own leases would make endless."""
        held = self._held_by(caller.uid)
        named = self.node.usable_gpus(AllocateSpec(gpus=spec.gpus)) if spec.gpus else frozenset()
        needed = max(spec.count or 0, len(named))
        left = len(self.usable_gpus(AllocateSpec(count=needed, gpus=spec.gpus), caller.uid))
        if named & held or needed > left:
            raise WouldWaitForever(
                f"you hold {len(held)} of this node's {len(self.topology.gpus)} GPUs, so "
                f"a wait for {needed} could only end when you free yours; free them first",
                count=needed,
                held=len(held),
            )

    def release_gpu(self, caller: Caller, ref: str | int) -> GpuStatus:
        """Root declares a draining or in-use GPU free: its present processes are ignored."""
        if not caller.is_root:
            raise PermissionDenied("only root may release a GPU")
        uuid = self.topology.resolve(ref)
        self.node.ignore_present_processes(uuid)
        return next(s for s in self.gpu_status() if s.gpu.uuid == uuid)

    def _held_by(self, uid: int) -> frozenset[str]:
        """The GPUs `uid`'s own leases hold; none for root, who may revoke any lease and
        so may queue behind its own."""
        if uid == 0:
            return frozenset()
        return frozenset(
            uuid
            for lease in self._active.values()
            if lease.owner_uid == uid
            for uuid in lease.uuids
        )

    # Changes --------------------------------------------------------------------------------

    def allocate(
        self, caller: Caller, spec: AllocateSpec, *, reserved: frozenset[str] = frozenset()
    ) -> Lease:
        """Grant a lease now, or raise (GpusUnavailable, GpuBusy, ...) and change nothing.

        `reserved` GPUs are held for earlier waiters: this request may not take them.
        """
        self.expire_due()
        retried = self._retried(caller, spec)
        if retried is not None:
            return retried
        request = request_for(self.topology, spec.count, spec.gpus, spec.min_free_memory_bytes)
        policy_name = spec.policy or self._settings.default_policy
        snapshot = self.node.snapshot(self._active.values(), reserved)
        choice = self._policy(policy_name).choose(snapshot, request)
        check_choice(policy_name, choice, request, snapshot)
        if not choice.exact:
            log.warning(
                "policy %s gave a set it could not prove best: %s", policy_name, choice.reason
            )
        lease = self._new_lease(caller, spec, policy_name, choice.gpus)
        self._ledger.grant(lease, caller.uid)
        self._active[lease.id] = lease
        self._deadlines.start(lease.id, lease.expires_at - lease.created_at)
        if spec.request_id is not None:
            self._by_request[(caller.uid, spec.request_id)] = lease.id
        return lease

    def withdraw(self, lease_id: str) -> list[Lease]:
        """Undo a grant whose answer could not be delivered (the client left, or timed out)."""
        lease = self._active.get(lease_id)
        if lease is None:
            return []
        detail = "granted, but the answer could not be delivered"
        return self._end([lease], LeaseState.FREED, actor_uid=0, detail=detail)

    def _retried(self, caller: Caller, spec: AllocateSpec) -> Lease | None:
        """The active lease an earlier request with the same id got, if any."""
        if spec.request_id is None:
            return None
        lease_id = self._by_request.get((caller.uid, spec.request_id))
        return self._active.get(lease_id) if lease_id is not None else None

    def renew(self, caller: Caller, lease_id: str, ttl_seconds: float | None = None) -> Lease:
        lease = self._owned_active(caller, lease_id)
        now = self._clock()
        ttl = self._ttl(ttl_seconds)
        renewed = replace(lease, expires_at=now + ttl)
        self._ledger.renew(lease.id, renewed.expires_at, caller.uid, now)
        self._active[lease.id] = renewed
        self._deadlines.start(lease.id, ttl)
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

    def expire_due(self) -> list[Lease]:
        """End every lease whose TTL ran out; their GPUs are free again."""
        due = [lease for lease in self._active.values() if self._deadlines.passed(lease)]
        return self._end(due, LeaseState.EXPIRED, actor_uid=0)

    # Internals ------------------------------------------------------------------------------

    def _new_lease(
        self, caller: Caller, spec: AllocateSpec, policy_name: str, uuids: Sequence[str]
    ) -> Lease:
        start_time = self._start_time_of(caller.pid) if spec.bind_to_process else None
        if spec.bind_to_process and start_time is None:
            raise InvalidRequest("the requesting process is gone; nothing to bind the lease to")
        now = self._clock()
        return Lease(
            id=_new_lease_id(),
            gpus=tuple(LeasedGpu(u, self.node.gpu(u).index) for u in uuids),
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

    def _end(
        self, leases: Sequence[Lease], state: LeaseState, actor_uid: int, detail: str | None = None
    ) -> list[Lease]:
        now = self._clock()
        ended = [lease.ended(state, now) for lease in leases]
        self._ledger.end(ended, actor_uid, detail)
        for lease in ended:
            self._active.pop(lease.id, None)
            self._deadlines.forget(lease.id)
            self.node.released(lease)
        self._by_request = {k: v for k, v in self._by_request.items() if v in self._active}
        return ended

    def _active_lease(self, lease_id: str) -> Lease:
        lease = self._active.get(lease_id)
        if lease is not None and self._deadlines.passed(lease):
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
            raise InvalidRequest("ttl_seconds must be positive", field="ttl_seconds", value=ttl)
        if ttl > self._settings.max_ttl_seconds:
            raise InvalidRequest(
                f"ttl_seconds may be at most {self._settings.max_ttl_seconds:g}",
                field="ttl_seconds",
                value=ttl,
            )
        return ttl

    def _policy(self, name: str) -> Policy:
        if name not in self._policies:
            self._policies[name] = get_policy(name)
        return self._policies[name]
