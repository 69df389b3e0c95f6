"""How far each fact about a process can be trusted, and the one rule that follows from it.

A fact is given by the kernel (the GPU driver is part of it), recorded by the daemon in its
ledger, or written by the process's user:

    kernel   the uid of a socket's peer (SO_PEERCRED), a process's effective uid (its
             /proc/PID/status), its start time held through a pidfd, its cgroup, the device
             and inode of the file it executes and of each file it maps executable, its
             tracer, its user namespace, the parents the daemon saw, the processes the driver
             shows on a GPU
    ledger   a lease's owner, units and holder; salvaged rows, a backup, the write-ahead log
    user     its environment (/proc/PID/environ is its own memory: rewritable after exec, and
             it may hold a name twice), the loader's variables in it (LD_PRELOAD, LD_AUDIT,
             LD_LIBRARY_PATH), its name (comm), its argv, the order of pids, what a request
             names

The rule: nothing is granted, exempted, adopted, charged, rebuilt or joined on what a user
wrote alone. A user-written fact may *choose* among candidates that kernel and ledger facts
already back (`choose`), *take away* (`takes_away`: a preloaded library exempts nothing), or
be *shown* (a process's name in a record). Every decision that gives a user something is a
member of `Decision`, naming the facts it rests on and what the user's facts may do in it;
user-written facts are read here only (`environment`, `loader_variables`, `names`), each read
naming its decision, so a decision that is not in the table cannot read them.
tests/test_trust_rule.py proves each row, as real users where identity matters.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gpuallocd.host.proc import PROC, command_of, environ_entries, read_environ

__all__ = [
    "LOADER_VARIABLES",
    "Decision",
    "Fact",
    "Rule",
    "Source",
    "Written",
    "choose",
    "environment",
    "loader_variables",
    "names",
    "takes_away",
]

T = TypeVar("T")

# What the dynamic loader reads to run code the program did not name (ld.so(8)), whatever
# their value (an empty one too) and wherever they stand (the loader takes the last).
LOADER_VARIABLES = (b"LD_PRELOAD", b"LD_AUDIT", b"LD_LIBRARY_PATH")


class Source(enum.Enum):
    """Who can have written a fact."""

    KERNEL = "the kernel"
    LEDGER = "the ledger"
    USER = "the process's user"


class Fact(enum.Enum):
    """A fact a decision may read, and its source."""

    PEER_UID = ("the uid of a socket's peer (SO_PEERCRED)", Source.KERNEL)
    OWNER = ("a process's effective uid (/proc/PID/status)", Source.KERNEL)
    START_TIME = ("a process's start time, held through a pidfd", Source.KERNEL)
    CGROUP = ("a process's cgroup (a scope it cannot leave)", Source.KERNEL)
    EXECUTABLE = ("the device and inode of the file it executes (/proc/PID/exe)", Source.KERNEL)
    MAPPED_FILES = ("the files it maps executable, by device and inode", Source.KERNEL)
    TRACER = ("its tracer (/proc/PID/status)", Source.KERNEL)
    USER_NAMESPACE = ("its user namespace (/proc/PID/ns/user)", Source.KERNEL)
    PARENTS = ("the parents the daemon saw (process events, /proc/PID/stat)", Source.KERNEL)
    GPU_PROCESSES = ("the processes the driver shows on a GPU, and their memory", Source.KERNEL)
    LEASES = ("the leases the ledger holds: owner, units, holder", Source.LEDGER)
    RECORDS = ("salvaged rows, a backup, the write-ahead log", Source.LEDGER)
    ENVIRONMENT = ("its environment (/proc/PID/environ)", Source.USER)
    LOADER = ("LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH in its environment", Source.USER)
    NAME = ("its name in the kernel (comm, set by prctl)", Source.USER)
    ARGV = ("its argv (exec -a)", Source.USER)
    PID_ORDER = ("the order of pids", Source.USER)
    REQUEST = ("what a request names (a pid, a GPU, a count)", Source.USER)

    def __init__(self, what: str, source: Source) -> None:
        self.what = what
        self.source = source


@dataclass(frozen=True)
class Rule:
    """One decision: what it gives a user, where it is decided, the kernel and ledger facts it
    rests on, and the user-written facts it reads: those that may choose among what the
    others back, those that may only take away, those only shown."""

    gives: str
    home: str
    rests_on: frozenset[Fact]
    chooses: frozenset[Fact] = frozenset()
    takes_away: frozenset[Fact] = frozenset()
    shown: frozenset[Fact] = frozenset()

    def __post_init__(self) -> None:
        if not self.rests_on:
            raise ValueError(f"{self.gives}: a decision rests on a kernel or ledger fact")
        written = [f.name for f in self.rests_on if f.source is Source.USER]
        if written:
            raise ValueError(f"{self.gives}: rests on what a user writes ({', '.join(written)})")
        read = self.chooses | self.takes_away | self.shown
        trusted = [f.name for f in read if f.source is not Source.USER]
        if trusted:
            raise ValueError(f"{self.gives}: {', '.join(trusted)} are not the user's to write")

    @property
    def reads(self) -> frozenset[Fact]:
        """Every user-written fact the decision reads, in any role."""
        return self.chooses | self.takes_away | self.shown


def _rule(gives: str, home: str, rests_on: Iterable[Fact], **user: Iterable[Fact]) -> Rule:
    return Rule(gives, home, frozenset(rests_on), **{k: frozenset(v) for k, v in user.items()})


_F = Fact


class Decision(enum.Enum):
    """Every decision that gives a user something, and how far it trusts what it reads. A new
    decision is one more member; tests/test_trust_rule.py then asks for its proof."""

    GRANT = _rule(
        "a GPU: a lease of the caller's", "api/peercred.py", {_F.PEER_UID, _F.LEASES},
        chooses={_F.REQUEST},
    )  # fmt: skip
    NESTING = _rule(
        "an enclosing lease's GPUs (a lease inside a lease)", "client/gpulease/nesting.py",
        {_F.PEER_UID, _F.LEASES}, chooses={_F.ENVIRONMENT},
    )  # fmt: skip
    ADOPTION = _rule(
        "a lease of a process already on a GPU", "allocator/unleased/adoption.py",
        {_F.GPU_PROCESSES, _F.OWNER, _F.START_TIME, _F.PEER_UID, _F.LEASES},
        chooses={_F.REQUEST, _F.PID_ORDER}, shown={_F.NAME},
    )  # fmt: skip
    EXEMPTION = _rule(
        "an exemption from unleased_use by program", "enforcement/programs.py",
        {_F.EXECUTABLE, _F.MAPPED_FILES, _F.TRACER, _F.USER_NAMESPACE}, takes_away={_F.LOADER},
    )  # fmt: skip
    SHARE_COUNT = _rule(
        "a process counted (and killed) in a share lease", "enforcement/shares.py",
        {_F.GPU_PROCESSES, _F.OWNER, _F.START_TIME, _F.LEASES}, chooses={_F.ENVIRONMENT},
    )  # fmt: skip
    INHERITED = _rule(
        "membership of a lease by the id its work inherited", "processes/inherited.py",
        {_F.OWNER, _F.START_TIME, _F.LEASES}, chooses={_F.ENVIRONMENT},
    )  # fmt: skip
    JOINING = _rule(
        "membership of a lease by a process that asks to join it", "allocator/leases/lifecycle.py",
        {_F.PEER_UID, _F.START_TIME, _F.LEASES}, chooses={_F.REQUEST},
    )  # fmt: skip
    NAMING = _rule(
        "nothing: a process's name, shown in records and views", "enforcement/proc_facts.py",
        {_F.OWNER, _F.START_TIME}, shown={_F.NAME, _F.ARGV},
    )  # fmt: skip
    DESCENT = _rule(
        "membership of a lease by descent", "processes/lease_processes.py",
        {_F.PARENTS, _F.CGROUP, _F.START_TIME, _F.LEASES},
    )  # fmt: skip
    REBUILT = _rule(
        "a lease rebuilt at recovery", "daemon/ledger_care/rebuild.py",
        {_F.RECORDS, _F.OWNER, _F.START_TIME, _F.GPU_PROCESSES}, chooses={_F.ENVIRONMENT},
    )  # fmt: skip
    HELD = _rule(
        "a GPU held at recovery for the processes on it", "daemon/ledger_care/rebuild.py",
        {_F.GPU_PROCESSES, _F.OWNER},
    )  # fmt: skip
    CHARGE = _rule(
        "energy and GPU time charged to a user", "allocator/power/split.py",
        {_F.GPU_PROCESSES, _F.OWNER, _F.LEASES},
    )  # fmt: skip

    @property
    def rule(self) -> Rule:
        found: Rule = self.value
        return found


@dataclass(frozen=True, slots=True)
class Written:
    """One value a process's user wrote (one occurrence: a name may be written twice)."""

    fact: Fact
    value: str

    def __str__(self) -> str:
        return self.value


def _may_read(decision: Decision, fact: Fact) -> None:
    if fact not in decision.rule.reads:
        raise ValueError(f"{decision.name} reads no {fact.name} (host/trust.py: Decision)")


def environment(
    decision: Decision, pid: int, *wanted: bytes, proc: Path = PROC
) -> dict[bytes, tuple[Written, ...]] | None:
    """Every value of each `wanted` name in the environment process `pid` started with, in
    order, as its user wrote them, for `decision`; None where the environment cannot be read
    (another user's takes CAP_SYS_PTRACE)."""
    _may_read(decision, Fact.ENVIRONMENT)
    environ = read_environ(pid, proc)
    if environ is None:
        return None
    found: dict[bytes, list[Written]] = {name: [] for name in wanted}
    for name, value in environ_entries(environ):
        if name in found:
            found[name].append(Written(Fact.ENVIRONMENT, (value or b"").decode(errors="replace")))
    return {name: tuple(values) for name, values in found.items()}


def loader_variables(decision: Decision, pid: int, proc: Path = PROC) -> tuple[Written, ...] | None:
    """Every entry of the loader's variables in `pid`'s environment (`NAME=value`, an empty
    value too, each occurrence); None where the environment cannot be read."""
    _may_read(decision, Fact.LOADER)
    environ = read_environ(pid, proc)
    if environ is None:
        return None
    return tuple(
        Written(Fact.LOADER, name.decode() + "=" + (value or b"").decode(errors="replace"))
        for name, value in environ_entries(environ)
        if name in LOADER_VARIABLES
    )


def names(decision: Decision, pid: int, proc: Path = PROC) -> tuple[Written, Written] | None:
    """The process's name in the kernel (comm) and its argv[0], to be shown; None when it is
    gone."""
    _may_read(decision, Fact.NAME)
    _may_read(decision, Fact.ARGV)
    found = command_of(pid, proc)
    if found is None:
        return None
    return Written(Fact.NAME, found[0]), Written(Fact.ARGV, found[1])


def choose(decision: Decision, claims: Iterable[Written], candidates: Mapping[str, T]) -> T | None:
    """The one candidate the user's claims name, for `decision`; None where there is no claim,
    where the claims differ (a name written twice, with two values) or where they name no
    candidate. `candidates` are what kernel and ledger facts already back, keyed by the value
    a user would write for each: a claim only picks one of them."""
    values = set()
    for claim in claims:
        if claim.fact not in decision.rule.chooses:
            raise ValueError(f"{decision.name}: {claim.fact.name} chooses nothing")
        values.add(claim.value)
    return candidates.get(values.pop()) if len(values) == 1 else None


def takes_away(decision: Decision, claims: Iterable[Written]) -> bool:
    """Whether the user wrote any of `claims`, each of which may only take away."""
    found = False
    for claim in claims:
        if claim.fact not in decision.rule.takes_away:
            raise ValueError(f"{decision.name}: {claim.fact.name} takes nothing away")
        found = True
    return found
