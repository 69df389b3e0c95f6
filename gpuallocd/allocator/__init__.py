"""The allocator: the only place that decides or writes leases.

The door, which the API and the daemon call, is `AllocatorFacade` (desks/facade.py). At the
top stand the small modules the desks and rooms share:

    publish.py          what a commit made durable, told to the observer and the log
    observer.py         LeaseObserver: who is told of each lease transition (metrics)
    bells.py            waking those who long-poll a lease's events
    worker.py           SerialWorker: one call at a time on the loop, group commit off it
    long_reads.py       history and accounting read off the event loop
    crash_points.py     named points where a test may have the daemon kill itself
    cleanups.py         work owed after a lease ended, retried from the ledger until done

Its rooms, each with a map of its own (floors guarded by tests/test_architecture.py):

    desks/    the façade and its desks by API area: GPUs, accounting, scheduling, energy,
              power; the façade builds them and hands each the parts it uses
    leases/   granting a lease: lifecycle, the parts it shares, specs, node view, choosing,
              TTLs, shares, ids
    queue/    waiting: the queue, its order and view, advance reservations, idle reclaim
    site/     the rules of a shared box: limits, quota, drain, reservations board, idle, purge
    unleased/ GPU use without a lease: each sample's processes judged, reported, adopted
    power/    energy per lease, power caps, the box's power budget
    notices/  the per-user feed: warnings before a lease ends, budgets, what samples tell
    preemption/  preemptible leases given back in time: who, when, the contract, a restart

`desks/` is the top room: it may import every other room and the modules at the top, and
nothing imports it but this door. `site/` imports nothing of the other rooms; `leases/`
nothing of `queue/` or `unleased/`; the other rooms import of the top only `worker.py`,
`long_reads.py`, `bells.py` and `crash_points.py`, which import nothing of the allocator.
The crash points stay here, not in `daemon/` where they are armed: the power and preemption
desks and the API's routes break at them too, and neither may import the daemon. The
processes a bound lease covers, and stopping them, are `gpuallocd.processes`, below. The
rules a request and a policy's answer obey live in `gpuallocd.policies.rules`, where `plan`
and `simulate` use them too.
"""

from __future__ import annotations

from gpuallocd.allocator.desks.facade import AllocatorFacade
from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import GPU_STATES, GpuStatus, NodeView
from gpuallocd.allocator.leases.parts import SharedParts
from gpuallocd.allocator.leases.specs import AllocateSpec, AllocatorSettings
from gpuallocd.allocator.observer import LeaseObserver
from gpuallocd.allocator.site.idle import IdleRules
from gpuallocd.allocator.site.limits import Limits, LimitsTable
from gpuallocd.allocator.site.rules import SiteRules

__all__ = [
    "GPU_STATES",
    "AllocateSpec",
    "AllocatorFacade",
    "AllocatorSettings",
    "GpuStatus",
    "IdleRules",
    "LeaseLifecycle",
    "LeaseObserver",
    "Limits",
    "LimitsTable",
    "NodeView",
    "SharedParts",
    "SiteRules",
]
