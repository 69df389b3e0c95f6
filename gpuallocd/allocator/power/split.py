"""Who a GPU's energy is charged to, at one live sample (docs/accounting.md, Who pays).

A GPU's parties at a sample are the leases that hold it (or part of it) and the users whose
processes use it. A process's user is the kernel's word: its effective uid in
/proc/PID/status (`host/proc.py`), never its environment, name or anything else it wrote. A
process whose owner cannot be read (gone, or in another pid namespace) counts for nobody.

- Only the holders' own processes on it, or none: each lease its fraction (a whole GPU all of
  it, idle draw included; a share or a MIG instance its memory over the GPU's); the rest of a
  partly leased GPU is nobody's.
- Any process of a user who holds no lease on it (another user on a leased GPU, anyone on a
  free one): the GPU is split among the users whose processes use it by the GPU memory those
  processes use (evenly per user where NVML cannot tell the memory of each). A user without a
  lease there pays their share, as unleased use; a lease pays its owner's share, never more
  than its fraction; a holder whose processes use none of it pays nothing for that sample.

The energy of an interval between two readings is split by the mean of its samples' parts
(`presence.py`). Pure: no clock, no driver, no ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuallocd.model import GpuProcess, Lease

__all__ = ["Holders", "Parts", "holders_by_gpu", "sample_parts", "user_shares"]

Holders = Mapping[str, tuple[int, float]]  # lease id -> (its owner's uid, its part of the GPU)


@dataclass
class Parts:
    """Each party's part of one GPU: leases by id, users without a lease there by uid."""

    leases: dict[str, float] = field(default_factory=dict)
    users: dict[int, float] = field(default_factory=dict)

    def add(self, other: Parts) -> None:
        for lease_id, part in other.leases.items():
            self.leases[lease_id] = self.leases.get(lease_id, 0.0) + part
        for uid, part in other.users.items():
            self.users[uid] = self.users.get(uid, 0.0) + part

    def mean(self, samples: int) -> Parts:
        """These parts, summed over `samples` samples, as the mean of one."""
        return Parts(
            {lease_id: part / samples for lease_id, part in self.leases.items()},
            {uid: part / samples for uid, part in self.users.items()},
        )


def holders_by_gpu(leases: Iterable[Lease]) -> dict[str, dict[str, tuple[int, float]]]:
    """Physical GPU -> the leases on it, each with its owner and the part of it it holds."""
    found: dict[str, dict[str, tuple[int, float]]] = {}
    for lease in leases:
        for unit in lease.gpus:
            on_gpu = found.setdefault(unit.parent or unit.uuid, {})
            held = on_gpu.get(lease.id)
            part = unit.fraction if held is None else held[1] + unit.fraction
            on_gpu[lease.id] = (lease.owner_uid, part)
    return found


def user_shares(processes: Iterable[GpuProcess]) -> dict[int, float]:
    """Each user's share of a GPU by the memory of their processes on it, summing to 1
    (evenly per user where NVML cannot say each process's memory); {} without a process of a
    known owner."""
    memory: dict[int, int] = {}
    known = True
    for process in processes:
        if process.uid is None:
            continue
        used = process.used_memory_bytes
        known = known and used is not None
        memory[process.uid] = memory.get(process.uid, 0) + (used or 0)
    total = sum(memory.values())
    if not memory:
        return {}
    if not known or total <= 0:
        return {uid: 1.0 / len(memory) for uid in memory}
    return {uid: used / total for uid, used in memory.items()}


def sample_parts(processes: Iterable[GpuProcess], holders: Holders) -> Parts:
    """Each party's part of the GPU at one sample (the rule in the module's docstring)."""
    shares = user_shares(processes)
    own = {uid for uid, _ in holders.values()}
    if not set(shares) - own:
        return Parts({lease_id: part for lease_id, (_, part) in holders.items()})
    owned: dict[int, float] = {}
    for uid, part in holders.values():
        owned[uid] = owned.get(uid, 0.0) + part
    leases = {
        lease_id: min(part, shares.get(uid, 0.0) * part / (owned[uid] or 1.0))
        for lease_id, (uid, part) in holders.items()
    }
    return Parts(leases, {uid: share for uid, share in shares.items() if uid not in own})
