"""The allocator: the only place that decides or writes leases.

The door, which the API and the daemon call:

    facade.py           AllocatorFacade: one method, one whole operation
    scheduling_desk.py  the façade's part for the queue's order and advance reservations
    accounting_desk.py  the façade's part for the record: history, usage, limits, admin log
    gpu_desk.py         the façade's part for the GPUs: status, drain, release, topology
    energy_desk.py      the façade's part for energy: the timer's readings, usage in kWh
    power_desk.py       the façade's part for power caps: what a request gets, putting back
    gpu_admin.py        drain, undrain and root's release of a GPU
    publish.py          what a commit made durable, told to the observer and the log
    observer.py         LeaseObserver: who is told of each lease transition (metrics)
    bells.py            waking those who long-poll a lease's events
    worker.py           SerialWorker: one call at a time on the loop, group commit off it
    long_reads.py       history and accounting read off the event loop
    crash_points.py     named points where a test may have the daemon kill itself
    cleanups.py         work owed after a lease ended, retried from the ledger until done

Its rooms, each with a map of its own (floors guarded by tests/test_architecture.py):

    leases/   granting a lease: lifecycle, specs, node view, choosing, TTLs, shares, ids
    queue/    waiting: the queue, its order and view, advance reservations, idle reclaim
    site/     the rules of a shared box: limits, quota, drain, reservations board, idle, purge
    unleased/ GPU use without a lease: each sample's processes judged, reported, adopted
    power/    energy per lease, power caps, the box's power budget
    notices/  the per-user feed: warnings before a lease ends, budgets, what samples tell
    preemption/  preemptible leases given back in time: who, when, the contract, a restart

`site/` imports nothing of the other rooms; `leases/` nothing of `queue/` or `unleased/`; no
room imports the door except `worker.py`, `long_reads.py`, `bells.py` and `crash_points.py`,
which import nothing of the allocator. The processes a bound lease covers, and stopping them, are
`gpuallocd.processes`, below. The rules a request and a policy's answer obey live in
`gpuallocd.policies.rules`, where `plan` and `simulate` use them too.
"""

from __future__ import annotations

from gpuallocd.allocator.facade import AllocatorFacade
from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import GPU_STATES, GpuStatus, NodeView
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
    "SiteRules",
]
