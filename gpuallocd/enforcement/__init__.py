"""Enforcement on the node itself, in one package: GPU use without a lease (found, reported,
stopped or adopted), memory shares held to their size, and device file access for
leaseholders. Its primitives (signals through pidfds, what /proc says) are below it, in
`processes/signals.py` and `host/proc.py`; what records or grants leases is the allocator's
(`allocator/unleased/`).

    rules.py        UnleasedRules: the mode per user and group, grace, exemptions;
                    UnleasedModes: the modes `[limits]` tables set for some
    decide.py       pure: the processes of a sample + who may use each unit → actions
    proc_facts.py   /proc and the user database about a process (reads only)
    acl.py          POSIX ACLs on device files, written as the kernel's xattr
    devices.py      which device files a leased unit has, and giving them to its holder
    shares.py       ShareEnforcer: a memory share's processes held to its size
    programs.py     which exempt program a process really runs (its executable, root's)
"""

from gpuallocd.enforcement.decide import Action, Seen, Step, Track, UnitUse, decide
from gpuallocd.enforcement.rules import (
    DEFAULT_EXEMPT_COMMANDS,
    MODES,
    UnleasedModes,
    UnleasedRules,
)

__all__ = [
    "DEFAULT_EXEMPT_COMMANDS",
    "MODES",
    "Action",
    "Seen",
    "Step",
    "Track",
    "UnitUse",
    "UnleasedModes",
    "UnleasedRules",
    "decide",
]
