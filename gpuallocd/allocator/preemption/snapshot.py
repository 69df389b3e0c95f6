"""The rule's snapshot (policies/preemption.py) made from the allocator's view: the preemptible
leases as candidates, the waiters as requests, the units free now. Read in the serial worker;
it writes nothing.

A memory share is not preempted for a request (one share's end does not free its GPU while
other shares of it remain) and a request for shares preempts nothing: preemption frees whole
GPUs and MIG instances.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.preemption.book import PreemptionBook
from gpuallocd.allocator.queue.waiting import Waiter
from gpuallocd.model import Lease, UnitKind
from gpuallocd.policies.preemption import Candidate, PreemptRequest

__all__ = ["candidate_of", "candidates", "free_units", "requests"]


def candidate_of(lease: Lease, book: PreemptionBook, *, by_gpu: bool = False) -> Candidate:
    """A preemptible lease as the rule sees it; `by_gpu`: its units as the physical GPUs they
    are on (what an advance reservation holds)."""
    terms = lease.preemptible
    assert terms is not None
    lost, checkpointed = book.lost(lease.id)
    units = {unit.gpu_uuid if by_gpu else unit.uuid for unit in lease.gpus}
    return Candidate(
        lease_id=lease.id,
        owner=lease.owner_name,
        owner_uid=lease.owner_uid,
        units=frozenset(units),
        ran_seconds=book.ran(lease.id),
        min_runtime_seconds=terms.min_runtime_seconds,
        lost_seconds=lost,
        checkpointed=checkpointed,
        notice_seconds=terms.notice_seconds,
        preempting=book.get(lease.id) is not None,
    )


def _preemptible(lifecycle: LeaseLifecycle, book: PreemptionBook) -> Iterable[Lease]:
    for lease_id in book.tracked():
        lease = lifecycle.active(lease_id)
        if lease is not None and lease.preemptible is not None:
            yield lease


def candidates(
    lifecycle: LeaseLifecycle, book: PreemptionBook, *, by_gpu: bool = False
) -> list[Candidate]:
    """Every active preemptible lease (but those of memory shares, for a request)."""
    return [
        candidate_of(lease, book, by_gpu=by_gpu)
        for lease in _preemptible(lifecycle, book)
        if by_gpu or all(unit.kind is not UnitKind.SHARE for unit in lease.gpus)
    ]


def requests(lifecycle: LeaseLifecycle, waiters: Sequence[Waiter]) -> list[PreemptRequest]:
    """The waiters in the queue's order as the rule sees them (not those for shares)."""
    found = []
    for waiter in waiters:
        spec, caller = waiter.spec, waiter.caller
        if spec.memory_bytes is not None:
            continue
        named = lifecycle.usable_gpus(replace(spec, count=None)) if spec.gpus else frozenset()
        found.append(
            PreemptRequest(
                id=waiter.id,
                owner=caller.user,
                owner_uid=caller.uid,
                count=max(spec.count or 0, len(named)),
                pool=lifecycle.usable_gpus(spec, caller.uid),
                named=named,
                preemptible=spec.preemptible,
            )
        )
    return found


def free_units(lifecycle: LeaseLifecycle) -> frozenset[str]:
    """Units nobody holds or uses now: free GPUs, and free MIG instances of healthy GPUs."""
    free: set[str] = set()
    for status in lifecycle.gpu_status():
        if status.state == "free":
            free.add(status.gpu.uuid)
        if status.live.healthy and not status.foreign_pids:
            free.update(mig.uuid for mig, held in status.instances if held is None)
    return frozenset(free)
