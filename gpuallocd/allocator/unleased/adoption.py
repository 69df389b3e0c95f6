"""Adoption: a process already running on a free GPU (or MIG instance) becomes a lease of its
owner, bound to that process, under every rule a grant obeys: the owner's limits, drains,
the queue's holds for waiters and advance reservations (a reservation of someone else's that
starts later shortens the lease to end before it, as a grant's defaulted TTL is; one running
now refuses it).

Used by `unleased_use = "adopt"` (allocator/unleased/guard.py), by `gpuallocctl adopt` and by
the recovery's holds (daemon/ledger_care/holds.py). The
lease lives as long as the process (and what it starts), up to the owner's longest TTL.
"""

from __future__ import annotations

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import NodeView
from gpuallocd.allocator.leases.sharing import UnitHolders
from gpuallocd.allocator.leases.slices import leased_units
from gpuallocd.allocator.site.drain import DrainBoard
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.site.reservation_board import ReservationBoard
from gpuallocd.allocator.site.ttl import longest_ttl
from gpuallocd.enforcement.proc_facts import owner_and_start, owner_of, proc_facts
from gpuallocd.errors import CallerError, CapacityError, GpuBusy, InvalidRequest, PermissionDenied
from gpuallocd.model import Caller, Gpu, GpuProcess, Lease, LeasedGpu, LeaseEvent, Topology
from gpuallocd.model.lease import new_lease_id
from gpuallocd.policies.rules import request_for

__all__ = ["ADOPTED_POLICY", "Adoption", "unit_lease", "unit_of"]

ADOPTED_POLICY = "adopted"  # the `policy` of an adopted lease: no policy chose it


def unit_lease(topology: Topology, unit_uuid: str) -> LeasedGpu | None:
    """How a lease holds the whole GPU or MIG instance `unit_uuid`; None for a UUID that is
    neither on this node."""
    if unit_uuid not in topology.by_uuid() and unit_uuid not in topology.instances():
        return None
    (unit,) = leased_units(topology, request_for(topology, 1, (unit_uuid,)), [unit_uuid])
    return unit


def unit_of(gpu: Gpu, process: GpuProcess) -> str:
    """The MIG instance a process runs in (by its instance ids), else its GPU."""
    if gpu.mig_mode and process.gpu_instance_id is not None:
        for mig in gpu.mig_devices:
            same_ci = process.compute_instance_id in (None, mig.compute_instance_id)
            if mig.gpu_instance_id == process.gpu_instance_id and same_ci:
                return mig.uuid
    return gpu.uuid


class Adoption:
    """Adoptions over the parts a grant obeys: the node's live state and topology, the
    drains, the advance reservations and the quota; recorded through the lifecycle."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        *,
        node: NodeView,
        quota: Quota,
        drains: DrainBoard,
        reservations: ReservationBoard,
    ) -> None:
        self._lifecycle = lifecycle
        self._node = node
        self._quota = quota
        self._drains = drains
        self._board = reservations

    def _check_free(self, unit_uuid: str, reserved: frozenset[str]) -> None:
        topology = self._node.topology
        gpu_uuid = topology.instances().get(unit_uuid, (None, None))[0]
        gpu = gpu_uuid.uuid if gpu_uuid is not None else unit_uuid
        holders = UnitHolders.of(self._lifecycle.leases())
        taken = (
            holders.instances.get(unit_uuid) is not None
            if unit_uuid != gpu
            else bool(holders.owners_on(gpu, (m.uuid for m in topology.by_uuid()[gpu].mig_devices)))
        )
        if taken or unit_uuid in reserved or gpu in reserved:
            why = "leased" if taken else "held for a waiter"
            raise GpuBusy(f"{unit_uuid} is {why}", gpus=[unit_uuid])
        if not self._node.live(gpu).healthy:
            raise GpuBusy(f"{unit_uuid} is unhealthy", gpus=[unit_uuid])
        self._drains.check_not_drained((unit_uuid,), topology)

    def _beside_reservations(self, owner: Caller, unit_uuid: str, now: float, ttl: float) -> float:
        """The TTL an adoption may have beside the advance reservations, or
        ReservationConflict."""
        board = self._board
        gpu = self._node.topology.instances().get(unit_uuid, (None, None))[0]
        gpu_uuid = gpu.uuid if gpu is not None else unit_uuid
        if gpu_uuid not in board.held(owner, now, ttl):
            return ttl
        for shorter in board.backfill_ttls(owner, now, ttl):  # longest first
            if gpu_uuid not in board.held(owner, now, shorter):
                return shorter
        raise board.conflict(owner, now, ttl, [gpu_uuid])

    def adopt(
        self,
        owner: Caller,
        unit_uuid: str,
        *,
        pid: int,
        started: int,
        now: float,
        detail: str,
        reserved: frozenset[str] = frozenset(),
        label: str = "adopted",
    ) -> Lease:
        """Record a lease of `owner` on `unit_uuid` bound to `pid` (started at `started`), or
        raise (GpuBusy, QuotaExceeded, ReservationConflict) and change nothing."""
        lifecycle = self._lifecycle
        self._check_free(unit_uuid, reserved)
        unit = unit_lease(self._node.topology, unit_uuid)
        if unit is None:
            raise InvalidRequest(f"no GPU or MIG instance {unit_uuid} on this node")
        ttl = longest_ttl(lifecycle.ttl_bounds(owner))
        ttl = self._beside_reservations(owner, unit_uuid, now, ttl)
        self._quota.check_grant(owner, lifecycle.leases(), gpus=unit.fraction)
        lease = Lease(
            id=new_lease_id(),
            gpus=(unit,),
            owner_uid=owner.uid,
            owner_name=owner.user,
            pid=pid,
            label=label,
            policy=ADOPTED_POLICY,
            created_at=now,
            expires_at=now + ttl,
            bound=True,
            pid_start_time=started,
            on_revoke="terminate",  # a revoke stops the adopted work, as it does `run`'s
        )
        lifecycle.record_grant(lease)
        lifecycle.note(lease.id, LeaseEvent.ADOPTED, detail)
        return lease

    def _on_gpus(self) -> list[tuple[Gpu, str, GpuProcess]]:
        """Every process on the node's GPUs at the last sample, with its GPU and unit."""
        return [
            (gpu, unit_of(gpu, p), p)
            for gpu in self._node.topology.gpus
            for p in self._node.live(gpu.uuid).processes
        ]

    def _wanted(
        self, caller: Caller, pid: int | None, gpu: str | int | None
    ) -> dict[str, tuple[Gpu, GpuProcess]]:
        """The caller's processes to adopt, one per unit (the lowest pid, or the one named)."""
        found = self._on_gpus()
        if pid is not None:
            found = [f for f in found if f[2].pid == pid]
            for _, _, theirs in (f for f in found if f[2].uid != caller.uid):
                owner = owner_of(theirs.uid)
                raise PermissionDenied(
                    f"process {pid} belongs to {owner.user if owner else '?'}, not you; "
                    "you can adopt only your own"
                )
        if gpu is not None:
            ref = str(gpu) if str(gpu) in self._node.topology.instances() else None
            uuid = ref or self._node.topology.resolve(gpu)
            found = [f for f in found if uuid in (f[0].uuid, f[1])]
        units: dict[str, tuple[Gpu, GpuProcess]] = {}
        for gpu_, unit, process in sorted(found, key=lambda f: f[2].pid):
            if process.uid == caller.uid:
                units.setdefault(unit, (gpu_, process))
        if not units:
            where = f"GPU {gpu}" if gpu is not None else "any GPU"
            what = (
                f"process {pid} is not on {where}"
                if pid is not None
                else f"none of yours on {where}"
            )
            raise InvalidRequest(f"no process to adopt ({what} at the last sample)")
        return units

    def adopt_own(
        self,
        caller: Caller,
        *,
        pid: int | None,
        gpu: str | int | None,
        now: float,
        reserved: frozenset[str] = frozenset(),
    ) -> list[Lease]:
        """`gpuallocctl adopt`: the caller's own processes on units they hold no lease on become
        their leases, one per unit. Raises the first refusal when none could be adopted."""
        adopted: list[Lease] = []
        refused: list[CallerError | CapacityError] = []
        held = {
            u.uuid
            for lease in self._lifecycle.leases()
            if lease.owner_uid == caller.uid
            for u in lease.gpus
        }
        for unit, (gpu_, process) in self._wanted(caller, pid, gpu).items():
            pinned = owner_and_start(process.pid)
            if unit in held or pinned is None:
                continue
            if pinned[0] != caller.uid:  # the pid is another process's since the sample
                refused.append(PermissionDenied(f"process {process.pid} is not yours"))
                continue
            facts = proc_facts(process.pid)
            command = facts.command if facts is not None else "?"
            detail = f"adopted by {caller.user}: pid {process.pid} ({command}) on GPU {gpu_.index}"
            owner = Caller(caller.uid, caller.gid, process.pid, caller.user, caller.groups)
            try:
                adopted.append(
                    self.adopt(
                        owner,
                        unit,
                        pid=process.pid,
                        started=pinned[1],
                        now=now,
                        detail=detail,
                        reserved=reserved,
                    )
                )
            except (CallerError, CapacityError) as exc:
                refused.append(exc)
        if not adopted and refused:
            raise refused[0]
        if not adopted:
            raise InvalidRequest("your processes run on GPUs you hold a lease on already")
        return adopted
