"""The allocator's side of GPU use without a lease: what the daemon records and grants.

    guard.py      UnleasedGuard: each sample's processes judged (enforcement/decide.py),
                  reported, signalled through processes/signals.py, or adopted
    adoption.py   a process already on a free GPU becomes its owner's lease, as a grant

The decision and the device files are `gpuallocd.enforcement`; this room holds only what
writes leases. Imports `leases/` and `site/`.
"""
