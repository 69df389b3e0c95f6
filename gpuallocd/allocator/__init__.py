"""The allocator: the only place that decides or writes leases.

    facade.py      AllocatorFacade, what the API and the daemon call (one method, one operation)
    waitqueue.py   first come, first served waiting with reservations
    worker.py      SerialWorker: one call at a time on the event loop, group commit
    watcher.py     ProcessWatcher: leases that end with their process (pidfd, /proc fallback)
    lifecycle.py   LeaseLifecycle: grant, renew, free, revoke, expire, record in the ledger
    node_view.py   NodeView: topology, live state, snapshots for policies, GPU status
    specs.py       AllocateSpec, AllocatorSettings
    site_rules.py  SiteRules: the limits table and the admin groups (reloaded on SIGHUP)
    limits.py      limits: which value applies to whom, the check of a request (pure)
    quota.py       Quota: a caller's use measured and held against their limits
    drain.py       DrainBoard: GPUs an admin took out of service
    idle.py        IdleTracker: which leases are idle, which to reclaim (pure)
    reclaim.py     IdleReclaimer: runs the tracker after each sample, revokes for waiters

The rules a request and a policy's answer obey live in `gpuallocd.policies.rules`, where
`plan` and `simulate` use them too.
"""

from __future__ import annotations

from gpuallocd.allocator.facade import AllocatorFacade
from gpuallocd.allocator.idle import IdleRules
from gpuallocd.allocator.lifecycle import LeaseLifecycle
from gpuallocd.allocator.limits import Limits, LimitsTable, lease_gpu_weight
from gpuallocd.allocator.node_view import GpuStatus, NodeView
from gpuallocd.allocator.site_rules import SiteRules
from gpuallocd.allocator.specs import AllocateSpec, AllocatorSettings

__all__ = [
    "AllocateSpec",
    "AllocatorFacade",
    "AllocatorSettings",
    "GpuStatus",
    "IdleRules",
    "LeaseLifecycle",
    "Limits",
    "LimitsTable",
    "NodeView",
    "SiteRules",
    "lease_gpu_weight",
]
