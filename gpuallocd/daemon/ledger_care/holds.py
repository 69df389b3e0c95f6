"""GPU units in use that no lease explains, once the leases are rebuilt: held, never free.

NVML shows processes on a unit that no active lease holds (its lease was lost, or it never
had one). The unit is not given out until someone looks:

- with one user's processes only, it becomes that user's lease, bound to the first started
  of them, as an adoption (allocator/unleased/adoption.py): within their limits, clear of
  drains and of others' reservations, for at most their longest lease. Where that breaks a
  rule, the line says which, and the unit is held for the admins instead;
- with several users' processes, it is held for the admins: a lease of root's, bound to
  no process, labelled with every user and pid on it, until an admin ends it (`gpuallocctl
  revoke`) or it expires. Never one user's for being the lowest pid or the first to start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import NodeView
from gpuallocd.allocator.site.reservation_board import caller_of_uid
from gpuallocd.allocator.unleased.adoption import Adoption, unit_lease
from gpuallocd.daemon.ledger_care.machine import Machine, OnUnit
from gpuallocd.daemon.ledger_care.records import user_name
from gpuallocd.errors import CallerError, CapacityError
from gpuallocd.model import Lease, LeaseEvent, Topology
from gpuallocd.model.lease import new_lease_id

__all__ = ["Holding", "hold_unexplained"]

MAX_LISTED = 8  # processes named in a hold's label
ADMIN_HOLD = "recovered: held for the admins"


def _users(processes: Sequence[OnUnit]) -> str:
    listed = sorted(processes, key=lambda p: (user_name(p.uid), p.pid))
    named = [f"{user_name(p.uid)} (pid {p.pid})" for p in listed[:MAX_LISTED]]
    more = len(listed) - MAX_LISTED
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class Holding:
    """What a hold is made with: the recovery's lifecycle (it records the holds), the node
    (its topology), the adoption a single user's hold is made by, and the longest a hold
    lasts (`max_ttl_seconds`)."""

    lifecycle: LeaseLifecycle
    node: NodeView
    adoption: Adoption
    hold_seconds: float


def _explained(lifecycle: LeaseLifecycle, topology: Topology, unit: str) -> bool:
    """Whether an active lease holds `unit`, its GPU, or (for a whole GPU) a part of it."""
    instances = topology.instances()
    gpu = instances[unit][0].uuid if unit in instances else unit
    for lease in lifecycle.leases():
        for held in lease.gpus:
            if held.uuid == unit or held.uuid == gpu or held.gpu_uuid == unit:
                return True
    return False


def _for_admins(
    holding: Holding, unit: str, processes: Sequence[OnUnit], why: str, now: float
) -> str:
    lifecycle = holding.lifecycle
    leased = unit_lease(holding.node.topology, unit)
    assert leased is not None  # the unit was found on this topology
    hold = holding.hold_seconds
    lease = Lease(
        id=new_lease_id(),
        gpus=(leased,),
        owner_uid=0,
        owner_name=user_name(0),
        pid=None,
        label=f"{ADMIN_HOLD}: in use by {_users(processes)}",
        policy="recovered",
        created_at=now,
        expires_at=now + hold,
    )
    lifecycle.record_grant(lease)
    lifecycle.note(lease.id, LeaseEvent.ADOPTED, f"recovered after ledger damage: {why}")
    return (
        f"held for the admins: GPU {leased.index} ({unit}), in use by {_users(processes)}: "
        f"{why} (lease {lease.id}; end it with `gpuallocctl revoke {lease.id}`)"
    )


def _for_its_user(holding: Holding, unit: str, processes: Sequence[OnUnit], now: float) -> str:
    first = min(processes, key=lambda p: (p.start, p.pid))
    owner = replace(caller_of_uid(first.uid), pid=first.pid)
    named = _users(processes)
    label = f"recovered: in use by {named}"
    try:
        lease = holding.adoption.adopt(
            owner,
            unit,
            pid=first.pid,
            started=first.start,
            now=now,
            detail=f"recovered after ledger damage: no lease explains {named} on {unit}",
            label=label,
        )
    except (CallerError, CapacityError) as exc:
        why = f"no lease explains it, and a lease of {owner.user}'s breaks a rule: {exc.message}"
        return _for_admins(holding, unit, processes, why, now)
    index = lease.gpus[0].index
    return (
        f"held: GPU {index} ({unit}) for {owner.user}, bound to pid {first.pid} (lease "
        f"{lease.id}): no lease explains {named} there"
    )


def hold_unexplained(holding: Holding, machine: Machine, now: float) -> list[str]:
    """Hold each unit in use that no active lease explains; one line each."""
    by_unit: dict[str, list[OnUnit]] = {}
    for process in machine.on_units:
        by_unit.setdefault(process.unit, []).append(process)
    lines = []
    for unit, processes in sorted(by_unit.items(), key=lambda u: (u[1][0].gpu.index, u[0])):
        if _explained(holding.lifecycle, holding.node.topology, unit):
            continue
        if len({p.uid for p in processes}) == 1:
            lines.append(_for_its_user(holding, unit, processes, now))
        else:
            why = "no lease explains it, and it runs processes of several users"
            lines.append(_for_admins(holding, unit, processes, why, now))
    return lines
