"""Enforcement on the node itself: GPU use without a lease (found, reported, stopped or
adopted) and device file access for leaseholders.

    rules.py        UnleasedRules: the mode per user and group, grace, exemptions;
                    UnleasedModes: the modes `[limits]` tables set for some
    decide.py       pure: the processes of a sample + who may use each unit → actions
    proc_facts.py   /proc and the user database about a process (reads only)
    acl.py          POSIX ACLs on device files, written as the kernel's xattr
    devices.py      which device files a leased unit has, and giving them to its holder
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
