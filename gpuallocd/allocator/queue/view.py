"""What the wait queue looks like from outside: who holds which free GPU, why each waiter
waits, and when it may start.

Pure functions over the queue in order and the GPUs' statuses; nothing here decides a grant.
The reasons follow squeue's words: `Resources` (not enough of the GPUs it can use are free)
and `Reserved` (enough are free, but they are held for a waiter ahead of it). The estimate
plays the queue forward through the soonest lease expiries, in order, as the queue itself
serves: each lease ends at its current expiry and each waiter, once granted, holds its GPUs
for its TTL. A lease renewed by its holder pushes the estimate back; it is a floor, not a
promise (squeue --start gives the same kind). A wait for power (`Power`) is estimated from the
same lease expiries: the first at which the leases ended by then free the watts it lacks.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from gpuallocd.allocator.leases.node_view import GpuStatus, Hold
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.model import Caller
from gpuallocd.policies.serving import serve_where_free

__all__ = ["PowerWait", "QueuedRequest", "WaitInfo", "describe_waiters", "holds"]

RESOURCES = "Resources"
RESERVED = "Reserved"
POWER = "Power"  # its GPUs are free, but the box's power budget is committed (power/budget.py)

# The GPUs that could serve a request, less those its owner (the uid given) holds already.
Usable = Callable[[AllocateSpec, int | None], frozenset[str]]


class QueuedRequest(Protocol):
    """A waiter as this module reads it."""

    @property
    def id(self) -> str: ...

    @property
    def caller(self) -> Caller: ...

    @property
    def spec(self) -> AllocateSpec: ...


W = TypeVar("W", bound=QueuedRequest)


@dataclass(frozen=True, slots=True)
class WaitInfo:
    """Why a waiter waits, what blocks it in words, and its estimated start (epoch seconds)."""

    reason: str
    detail: str
    estimated_start_at: float | None


@dataclass(frozen=True, slots=True)
class PowerWait:
    """Why the last grant did not fit the power budget (power/budget.py), by how many mW, and
    the mW the end of the leases on some GPUs frees."""

    note: str
    short_mw: int
    frees_mw: Callable[[frozenset[str]], int]


@dataclass(frozen=True, slots=True)
class _Need:
    named: frozenset[str]  # GPUs the request names
    pool: frozenset[str]  # every GPU that could serve it
    count: int

    def fits(self, available: set[str]) -> bool:
        return self.named <= available and len(self.pool & available) >= self.count

    def take(self, available: set[str]) -> frozenset[str]:
        extra = sorted((self.pool & available) - self.named)[: self.count - len(self.named)]
        return self.named | frozenset(extra)


def _needs(waiters: Sequence[QueuedRequest], usable: Usable) -> list[_Need]:
    """What each waiter needs; the GPUs a request names looked up once per list of names."""
    named: dict[tuple[str | int, ...], frozenset[str]] = {(): frozenset()}

    def need(spec: AllocateSpec) -> _Need:
        if spec.gpus not in named:
            named[spec.gpus] = usable(replace(spec, count=None), None)
        names = named[spec.gpus]
        return _Need(names, usable(spec, None), max(spec.count or 0, len(names)))

    return [need(w.spec) for w in waiters]


def holds(
    waiters: Iterable[W],
    usable: Callable[[W], frozenset[str]],
    wanted: Collection[str] = (),
) -> dict[str, Hold]:
    """The waiter each GPU is held for: the first in the queue that could use it (`usable`).
    `wanted`: every GPU some waiter could use; once each is held, nobody later is read."""
    held: dict[str, Hold] = {}
    for position, waiter in enumerate(waiters, start=1):
        if wanted and len(held) >= len(wanted):
            break
        caller = waiter.caller
        reservation = Hold(waiter.id, position, caller.uid, caller.user)
        for uuid in sorted(usable(waiter)):
            held.setdefault(uuid, reservation)
    return held


def _releases(
    statuses: Sequence[GpuStatus], held_until: Mapping[str, float]
) -> list[tuple[float, frozenset[str]]]:
    """When each lease's GPUs come back, soonest first (only GPUs that are otherwise fine);
    a GPU a reservation holds comes back at its end at the earliest."""
    by_time: dict[float, set[str]] = {}
    for status in statuses:
        lease, uuid = status.lease, status.gpu.uuid
        usable = status.live.healthy and not status.foreign_pids
        if lease is not None and usable:
            by_time.setdefault(max(lease.expires_at, held_until.get(uuid, 0.0)), set()).add(uuid)
        elif status.state == "free" and uuid in held_until:
            by_time.setdefault(held_until[uuid], set()).add(uuid)
    releases = [(at, frozenset(uuids)) for at, uuids in by_time.items()]
    heapq.heapify(releases)
    return releases


def _detail(need: _Need, free: set[str], statuses: Mapping[str, GpuStatus], kept: int = 0) -> str:
    """In words why a request waits for GPUs; `kept`: the free GPUs held for it meanwhile,
    which `status` shows as reserved for it, not as free."""
    if need.named:
        busy = sorted(need.named - free, key=lambda uuid: statuses[uuid].gpu.index)
        held = ", ".join(_holder_text(statuses[uuid]) for uuid in busy)
        return f"wants GPU {_indices(need.named, statuses)}; {held}"
    if kept:
        return (
            f"wants {need.count} GPU(s); {kept} reserved for it, {need.count - kept} more to come"
        )
    return f"wants {need.count} GPU(s); 0 free"


def _indices(uuids: frozenset[str], statuses: Mapping[str, GpuStatus]) -> str:
    return ",".join(str(i) for i in sorted(statuses[u].gpu.index for u in uuids if u in statuses))


def _holder_text(status: GpuStatus) -> str:
    lease = status.lease
    index = status.gpu.index
    text = f"GPU {index} leased by {lease.owner_name}" if lease else f"GPU {index} {status.state}"
    if status.foreign_pids:  # a process whose user holds no lease on it (docs/enforcement.md)
        text += f" (pid {', '.join(map(str, status.foreign_pids))} uses it without a lease)"
    return text


def describe_waiters(
    waiters: Sequence[QueuedRequest],
    statuses: Sequence[GpuStatus],
    usable: Usable,
    *,
    now: float,
    ttl_of: Callable[[AllocateSpec, Caller], float],
    held_until: Mapping[str, float] | None = None,
    power: PowerWait | None = None,
) -> list[WaitInfo]:
    """Reason, detail and estimated start of each waiter, in queue order.

    `statuses` are the GPUs without reservations (free means nobody holds or uses it);
    `held_until`: GPUs advance reservations hold from the queue, and until when;
    `power`: why the last grant did not fit the power budget, where one did not.
    """
    held = held_until or {}
    by_uuid = {s.gpu.uuid: s for s in statuses}
    needs = _needs(waiters, usable)
    free = {s.gpu.uuid for s in statuses if s.state == "free"}
    reasons = _reasons(needs, free, by_uuid, power.note if power else None)
    releases = _releases(statuses, held)
    power_start = _power_start(sorted(releases), power) if power else None
    ttls = [ttl_of(w.spec, w.caller) for w in waiters]  # each waiter's own limits
    starts = _play_forward(needs, free - held.keys(), releases, now, ttls)
    starts = [power_start if r == POWER else at for (r, _), at in zip(reasons, starts, strict=True)]
    return [
        WaitInfo(reason, detail, start if start is not None and start > now else None)
        for (reason, detail), start in zip(reasons, starts, strict=True)
    ]


def _power_start(
    releases: Iterable[tuple[float, frozenset[str]]], power: PowerWait
) -> float | None:
    """The first lease expiry by which the leases ended free the watts a power wait lacks."""
    freed = 0
    for at, gpus in releases:
        freed += power.frees_mw(gpus)
        if freed >= power.short_mw:
            return at
    return None


def _reasons(
    needs: Sequence[_Need],
    free: set[str],
    statuses: Mapping[str, GpuStatus],
    power_note: str | None = None,
) -> list[tuple[str, str]]:
    reasons: list[tuple[str, str]] = []
    held: dict[str, int] = {}  # GPU -> position of the waiter it is held for
    for position, need in enumerate(needs, start=1):
        blocked = {uuid for uuid in need.pool if uuid in held}
        if need.fits(free) and not need.fits(free - blocked):
            first = min(held[uuid] for uuid in blocked)
            reasons.append((RESERVED, f"free GPUs are held for position {first}"))
        elif power_note and need.fits(free - blocked):
            reasons.append((POWER, power_note))
        else:
            kept = len({uuid for uuid in need.pool & free if uuid not in held})
            reasons.append((RESOURCES, _detail(need, free, statuses, kept)))
        for uuid in need.pool:
            held.setdefault(uuid, position)
    return reasons


def _play_forward(
    needs: Sequence[_Need],
    free_now: set[str],
    releases: list[tuple[float, frozenset[str]]],
    now: float,
    ttls: Sequence[float],
) -> list[float | None]:
    """Serve the queue as the daemon does, at now and at each release; when each would start.
    Each serve looks only at the waiters of the GPUs free then (`serve_where_free`); a need
    of no GPU (count 0) is served at once, which no estimate shows."""
    starts: list[float | None] = [None] * len(needs)
    free, at = set(free_now), now
    lines = _Lines(needs)

    def grant(i: int, held: frozenset[str]) -> frozenset[str] | None:
        available = free - held
        if not needs[i].fits(available):
            return None
        taken = needs[i].take(available)
        free.difference_update(taken)
        starts[i] = at
        lines.served(i)
        heapq.heappush(releases, (at + ttls[i], taken))
        return taken

    while lines.waiting:
        serve_where_free(
            lines.of(list(free)), free.__contains__, grant, lambda i: needs[i].pool, lambda i: i
        )
        if not lines.waiting or not releases:
            break
        at, gpus = heapq.heappop(releases)
        free |= gpus
        while releases and releases[0][0] <= at:
            free |= heapq.heappop(releases)[1]
    return starts


class _Lines:
    """For each GPU, the positions of the needs that could use it, in queue order; served
    ones are passed over, and dropped once they lead a line."""

    def __init__(self, needs: Sequence[_Need]) -> None:
        self._lines: dict[str, list[int]] = {}
        for i, need in enumerate(needs):
            for uuid in need.pool if need.count > 0 else ():
                self._lines.setdefault(uuid, []).append(i)
        self._fronts = dict.fromkeys(self._lines, 0)
        self._served: set[int] = set()
        self.waiting = sum(need.count > 0 for need in needs)

    def served(self, i: int) -> None:
        self._served.add(i)
        self.waiting -= 1

    def of(self, free: Iterable[str]) -> Iterator[tuple[str, Iterator[int]]]:
        """The line of each free GPU that has one."""
        for uuid in free:
            if uuid in self._lines:
                yield uuid, self._after_front(uuid)

    def _after_front(self, uuid: str) -> Iterator[int]:
        line, front = self._lines[uuid], self._fronts[uuid]
        while front < len(line) and line[front] in self._served:
            front += 1
        self._fronts[uuid] = front
        return (line[j] for j in range(front, len(line)) if line[j] not in self._served)
