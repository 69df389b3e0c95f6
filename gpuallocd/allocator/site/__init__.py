"""The rules of a shared box, as an admin sets them: whom a grant is refused to and why.

    rules.py               SiteRules: the limits table and the admin groups (reloaded on SIGHUP)
    limits.py              Limits, LimitsTable: which value applies to whom; a request's check
    quota.py               Quota: a caller's use measured and held against their limits
    drain.py               DrainBoard: GPUs an admin took out of service
    reservation_board.py   ReservationBoard: GPUs promised to someone for a window of time
    ttl.py                 the lifetime a grant gets: one rule for grants, renewals, estimates
    preempt_bounds.py      the terms a preemptible lease gets: minimum runtime, lead, grace
    request_bounds.py      a request resolved in one place at the grant: TTL, power cap, terms
    budgets.py             GPU-hour and kWh budgets over rolling windows (pure)
    idle.py                IdleTracker: which leases are idle, which to reclaim (pure)
    purge.py               ended leases and records past the history's retention

The ground floor: imports nothing of `leases/` or `queue/`.
"""
