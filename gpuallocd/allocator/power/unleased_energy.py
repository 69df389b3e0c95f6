"""Energy and GPU time of unleased use, charged to its owner (docs/accounting.md).

At each reading of the energy timer, a GPU that no active lease holds any part of, with
processes on it, is read as well: the energy it drew since its previous reading, and the time
between the two, are charged to the owners of those processes. One owner gets all of it
(measured); several share it by the GPU memory their processes use (evenly where NVML cannot
say), an estimate. A GPU partly leased is left to its leases.
"""

from __future__ import annotations

import pwd
from collections.abc import Callable, Iterable, Mapping

from gpuallocd.model import Gpu, Lease, LiveState
from gpuallocd.model.energy import EnergyUse

__all__ = ["owner_name", "split_unleased", "unleased_owners"]

Interval = tuple[float, float]  # joules drawn, seconds between the readings


def owner_name(uid: int) -> str:
    """A uid's user name (its number where the user database has none)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _parts(state: LiveState) -> dict[int, float]:
    """Each owner's part of a GPU: their processes' memory over all of it (evenly without)."""
    memory: dict[int, float] = {}
    for process in state.processes:
        if process.uid is not None:
            memory[process.uid] = memory.get(process.uid, 0.0) + (process.used_memory_bytes or 0)
    total = sum(memory.values())
    if not memory:
        return {}
    if total <= 0:
        return {uid: 1.0 / len(memory) for uid in memory}
    return {uid: used / total for uid, used in memory.items()}


def unleased_owners(
    gpus: Iterable[Gpu], live: Callable[[str], LiveState], leases: Iterable[Lease]
) -> dict[str, dict[int, float]]:
    """GPU UUID -> {uid: part} for GPUs no lease holds any part of that run processes."""
    held = {unit.gpu_uuid for lease in leases for unit in lease.gpus}
    found = {}
    for gpu in gpus:
        if gpu.uuid not in held:
            parts = _parts(live(gpu.uuid))
            if parts:
                found[gpu.uuid] = parts
    return found


def split_unleased(
    drawn: Mapping[str, Interval],
    owners: Mapping[str, Mapping[int, float]],
    at: float,
    name_of: Callable[[int], str] = owner_name,
) -> list[EnergyUse]:
    """One row per owner per GPU read: their part of its energy and of the time."""
    uses = []
    for uuid, parts in owners.items():
        if uuid not in drawn:
            continue
        joules, seconds = drawn[uuid]
        for uid, part in sorted(parts.items()):
            estimate = len(parts) > 1
            uses.append(
                EnergyUse(None, uid, name_of(uid), at, joules * part, estimate, seconds * part)
            )
    return uses
