"""The words of each step of the contract, as the lease's history (its event stream), its
owner's notice and the log tell them; pure.

    preempt_warning   SIGTERM at 14:02:10, deadline 14:07:10 (or at a checkpoint
                      acknowledged sooner): preempting lease 3f2a of alice for bob's request:
                      it ran 2h10m, past its minimum of 30m; 2h10m of work since its grant
    preempt_signal    SIGTERM sent to 3 process(es) of the lease; its holder hears it here
    checkpoint_done   /scratch/ckpt/step-4000.pt   (a path as the job gave it; ", late")
    preempted         checkpoint acknowledged: /scratch/ckpt/step-4000.pt
                      deadline passed with no checkpoint acknowledged: what was left was killed
"""

from __future__ import annotations

import signal
import time

from gpuallocd.model import Lease, Preemption
from gpuallocd.model.notice import EndingReason, Notice, ending_notice
from gpuallocd.text import escape_unprintable

__all__ = [
    "acknowledged_detail",
    "at_clock",
    "checkpoint_detail",
    "epoch_of",
    "first_notice",
    "killed_detail",
    "signal_detail",
    "signal_number",
    "warning_detail",
]

PATH_SHOWN = 300  # characters of a checkpoint path a history line shows (the ledger keeps all)


def at_clock(wall: float) -> str:
    """A wall time as the history says it: `14:02:10`."""
    return time.strftime("%H:%M:%S", time.localtime(wall))


def signal_number(name: str) -> int:
    """The number of a signal a preemptible lease chose (model/preemption.py's SIGNALS)."""
    return int(signal.Signals[name])


def warning_detail(record: Preemption) -> str:
    return (
        f"{record.signal} at {at_clock(record.signal_at)}, deadline {at_clock(record.deadline_at)} "
        f"(or at a checkpoint acknowledged sooner): {record.explanation}"
    )


def signal_detail(record: Preemption, sent: int) -> str:
    return (
        f"{record.signal} sent to {sent} process(es) of the lease; its holder hears it here; "
        f"deadline {at_clock(record.deadline_at)}"
    )


def _path(path: str | None) -> str:
    if path is None:
        return "(no path given)"
    shown = escape_unprintable(path)
    return shown if len(shown) <= PATH_SHOWN else shown[: PATH_SHOWN - 1] + "…"


def checkpoint_detail(path: str | None, *, late: bool) -> str:
    return _path(path) + (" (late: after the deadline)" if late else "")


def acknowledged_detail(path: str | None, *, late: bool) -> str:
    when = "after its deadline" if late else "before its deadline"
    return f"checkpoint acknowledged {when}: {_path(path)}"


def killed_detail() -> str:
    return "deadline passed with no checkpoint acknowledged: what was left of it was killed"


def first_notice(lease: Lease, record: Preemption, now: float) -> Notice:
    """The owner's notice of the preemption, written with its warning; the same key as the
    first threshold the notices' timer arms for it, so it is told once."""
    told = record.deadline_at - record.decided_at
    return ending_notice(
        lease,
        EndingReason.PREEMPTION,
        deadline=record.deadline_at,
        left=told,
        threshold=told,
        epoch=epoch_of(record),
        now=now,
        why=f"for {record.for_user}",
    )


def epoch_of(record: Preemption) -> str:
    """What names a preemption's deadline across a restart, in notices' keys."""
    return f"{record.decided_at:.0f}"
