"""What to do about processes that use a GPU without a lease: pure, one sample at a time.

In: the processes seen on the node's units (GPUs, MIG instances), who may use each unit,
what was done so far per process (its `Track`), the rules, and the time. Out: the actions
of this sample and the tracks to keep. No I/O and no clock: the caller reads /proc and the
ledger, acts, and feeds the result of an adoption back (`adopt_refused`).

Per offending process: it is reported once (every mode but `off`); `terminate` sends SIGTERM
once the grace has passed since it was first seen and SIGKILL `kill_after_seconds` later;
`adopt` turns it into a lease of its owner where its unit is free, and where it is not (or
the owner is over a limit) falls back to `over_limit` (report, or terminate after the grace).
Root's processes, and those whose owner cannot be read, are reported and never signalled
nor adopted (nor one whose start time cannot be read); exempt ones are not looked at.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpuallocd.enforcement.rules import UnleasedRules

__all__ = ["Action", "Seen", "Step", "Track", "UnitUse", "decide", "offends"]

# A process on a unit: one that runs on two GPUs is tracked (and reported) on each, so the
# holder of the second hears of it even when it was seen on the first before.
Key = tuple[int, int | None, str]


@dataclass(frozen=True, slots=True)
class Seen:
    """One process on one unit in a sample, as /proc describes it."""

    pid: int
    start_time: int | None
    uid: int | None
    user: str
    command: str
    argv0: str
    gpu_uuid: str
    gpu_index: int
    unit_uuid: str  # the GPU's UUID, or the MIG instance's where the process runs in one
    groups: frozenset[str] = frozenset()
    program: str | None = None  # where only root can have named it so (programs.py)

    @property
    def key(self) -> Key:
        return (self.pid, self.start_time, self.unit_uuid)

    @property
    def where(self) -> str:
        """The unit as people name it: `GPU 3`, or `GPU 3 (MIG-...)`."""
        if self.unit_uuid == self.gpu_uuid:
            return f"GPU {self.gpu_index}"
        return f"GPU {self.gpu_index} ({self.unit_uuid})"

    def describe(self) -> str:
        return f"pid {self.pid} of {self.user} uses {self.where} without a lease ({self.command})"


@dataclass(frozen=True, slots=True)
class UnitUse:
    """Who may use one unit now: the uids holding a lease on it (or a part of it), those
    leases, and whether it could be adopted (no lease, healthy, not drained nor reserved)."""

    holders: frozenset[int] = frozenset()
    lease_ids: tuple[str, ...] = ()
    adoptable: bool = False


class Step(str, enum.Enum):
    REPORT = "reported"
    TERMINATE = "terminated"  # SIGTERM
    KILL = "killed"  # SIGKILL
    ADOPT = "adopted"


@dataclass(frozen=True, slots=True)
class Action:
    step: Step
    seen: Seen
    lease_ids: tuple[str, ...]  # the leases of the unit: their holders are told


@dataclass(frozen=True, slots=True)
class Track:
    """What was seen and done about one process."""

    first_seen: float
    reported: bool = False
    terminated_at: float | None = None
    killed: bool = False
    adopt_refused: bool = False


def offends(seen: Seen, use: UnitUse, rules: UnleasedRules) -> bool:
    """A process whose owner holds no lease on its unit, and is not exempt. One whose owner
    cannot be read (another PID namespace) counts on a free unit only."""
    if rules.exempt(seen.user, seen.program):
        return False
    if seen.uid is None:
        return not use.holders
    return seen.uid not in use.holders


def _signalable(seen: Seen) -> bool:
    return seen.uid is not None and seen.uid != 0


def _terminate(seen: Seen, track: Track, rules: UnleasedRules, now: float) -> Step | None:
    if not _signalable(seen) or track.killed:
        return None
    if track.terminated_at is None:
        return Step.TERMINATE if now - track.first_seen >= rules.grace_seconds else None
    return Step.KILL if now - track.terminated_at >= rules.kill_after_seconds else None


def _steps(seen: Seen, use: UnitUse, track: Track, rules: UnleasedRules, now: float) -> list[Step]:
    mode = rules.mode_for(seen.user, seen.groups)
    if mode == "off":
        return []
    adoptable = use.adoptable and not track.adopt_refused and seen.start_time is not None
    if mode == "adopt" and adoptable and _signalable(seen):
        return [Step.ADOPT]
    steps = [] if track.reported else [Step.REPORT]
    enforce = mode == "terminate" or (mode == "adopt" and rules.over_limit == "terminate")
    step = _terminate(seen, track, rules, now) if enforce else None
    return steps + ([step] if step else [])


def _after(track: Track, step: Step, now: float) -> Track:
    if step is Step.REPORT:
        return replace(track, reported=True)
    if step is Step.TERMINATE:
        return replace(track, terminated_at=now)
    if step is Step.KILL:
        return replace(track, killed=True)
    return track


def decide(
    seen: Sequence[Seen],
    units: Mapping[str, UnitUse],
    tracks: Mapping[Key, Track],
    rules: UnleasedRules,
    now: float,
) -> tuple[list[Action], dict[Key, Track]]:
    """This sample's actions, and the tracks of the offending processes seen in it (those no
    longer seen are forgotten)."""
    actions: list[Action] = []
    kept: dict[Key, Track] = {}
    for process in seen:
        use = units.get(process.unit_uuid, UnitUse())
        if not offends(process, use, rules):
            continue
        track = tracks.get(process.key) or Track(first_seen=now)
        for step in _steps(process, use, track, rules, now):
            actions.append(Action(step, process, use.lease_ids))
            track = _after(track, step, now)
        kept[process.key] = track
    return actions, kept
