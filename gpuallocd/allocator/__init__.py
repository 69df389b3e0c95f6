"""The allocator: the only place that decides or writes leases.

    facade.py      AllocatorFacade, what the API and the daemon call (one method, one operation)
    waitqueue.py   first come, first served waiting with reservations
    queue_view.py  the queue seen from outside: reservations, reasons, estimated starts
    events_log.py  one key=value INFO line per grant, free, expiry, revoke (after the commit)
    worker.py      SerialWorker: one call at a time on the event loop, group commit off it
    lifecycle.py   LeaseLifecycle: grant, renew, free, revoke, expire, record in the ledger
    node_view.py   NodeView: topology, live state, snapshots for policies, GPU status
    specs.py       AllocateSpec, AllocatorSettings
    observer.py    LeaseObserver: who is told of each lease transition (metrics)
    site_rules.py  SiteRules: the limits table and the admin groups (reloaded on SIGHUP)
    limits.py      limits: which value applies to whom, the check of a request (pure)
    quota.py       Quota: a caller's use measured and held against their limits
    drain.py       DrainBoard: GPUs an admin took out of service
    idle.py        IdleTracker: which leases are idle, which to reclaim (pure)
    reclaim.py     IdleReclaimer: runs the tracker after each sample, revokes for waiters

The processes a bound lease covers, and stopping them, are `gpuallocd.processes`, below.
The rules a request and a policy's answer obey live in `gpuallocd.policies.rules`, where
`plan` and `simulate` use them too.
"""

from __future__ import annotations

from gpuallocd.allocator.facade import AllocatorFacade
from gpuallocd.allocator.idle import IdleRules
from gpuallocd.allocator.lifecycle import LeaseLifecycle
from gpuallocd.allocator.limits import Limits, LimitsTable
from gpuallocd.allocator.node_view import GPU_STATES, GpuStatus, NodeView
from gpuallocd.allocator.observer import LeaseObserver
from gpuallocd.allocator.site_rules import SiteRules
from gpuallocd.allocator.specs import AllocateSpec, AllocatorSettings

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
