"""Granting a lease: what is asked, where it goes, how long it lives, and its record.

    lifecycle.py      LeaseLifecycle: grant, renew, free, revoke, expire; the ledger's writes
    parts.py          SharedParts: settings, node view, quota, drains, reservations, lease
                      hardware; made once, handed to the lifecycle and to each desk
    specs.py          AllocateSpec, AllocatorSettings: the request and the settings, as values
    node_view.py      NodeView: topology, live state, snapshots for policies, GPU status
    choices.py        snapshots and policy choices cached per node state
    chooser.py        the checked choice of a policy for one request
    slices.py         MIG instances, AMD partitions and memory shares: placing, recording
    sharing.py        which GPUs are shared by memory, and who holds what where
    deadlines.py      when each lease expires, on a clock no one can set
    request_ids.py    a retried allocate with the same id gets the same lease
    servable.py       which GPUs a waiter could ever get; a wait that could never end
    health_notice.py  a health failure on a leased GPU, told to its holder once
    events_log.py     one key=value INFO line per transition, after the commit

Imports `site/` (the rules a grant obeys); never `queue/`.
"""
