"""Notices: what a person is told of their leases, each once, from a per-user feed.

A notice is one row of the ledger's feed (`notices`), addressed to one user (`uid`; the site's
own feed, for the admins' site channels, is `SITE_UID`) and unique by its `key`, so the same
fact is never told twice, whoever writes it again (a restart, a retry): a grant after a wait,
a lease's coming end (`ending`: a reason, a deadline, a threshold), a revoke or an end the
owner did not ask for, a budget at 80 % or 100 %, a GPU of theirs turned unhealthy, a process
of theirs on a GPU without a lease.

The builders here are pure: a notice's title and body are written once, by the daemon, with
every text a user controls (a label, a command) escaped and cut short; channels escape again
for their own medium (markup for a desktop, headers for mail).
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuallocd.model.durations import typed_duration
from gpuallocd.model.lease import Lease, LeaseState
from gpuallocd.text import escape_unprintable

__all__ = [
    "DEFAULT_THRESHOLDS",
    "LABEL_SHOWN",
    "SITE_UID",
    "EndingReason",
    "Notice",
    "NoticeKind",
    "budget_notice",
    "end_notice",
    "ending_notice",
    "granted_notice",
    "site_unhealthy_notice",
    "unhealthy_notice",
    "unleased_notice",
]

SITE_UID = -1  # the site's feed: what the admins' site channels deliver
DEFAULT_THRESHOLDS = (900.0, 60.0)  # warned 15 minutes and 1 minute before a lease ends
LABEL_SHOWN = 80  # characters of a label (or a command) a notice shows


class NoticeKind(str, enum.Enum):
    GRANTED = "granted"  # a waiting request got its GPUs
    ENDING = "ending"  # a lease ends soon (a reason, a deadline, a threshold)
    REVOKED = "revoked"  # an admin or a daemon rule (idle reclaim, preemption) took the lease
    ENDED = "ended"  # expired, or its processes exited: an end the owner did not ask for
    BUDGET = "budget"  # a budget at 80 % or 100 %
    GPU_UNHEALTHY = "gpu-unhealthy"  # a GPU of the user's lease (or, site feed: any GPU)
    UNLEASED_USE = "unleased-use"  # a process of the user on a GPU without a lease


class EndingReason(str, enum.Enum):
    """Why a lease will end at its deadline; each warned at the owner's thresholds."""

    EXPIRY = "expiry"  # its TTL runs out unless renewed
    IDLE_RECLAIM = "idle-reclaim"  # idle: it may be taken for a waiter from then
    RESERVATION = "reservation"  # an advance reservation of its GPUs starts
    PREEMPTION = "preemption"  # it is preempted: it ends at its checkpoint or the deadline
    REVOKE = "revoke"  # revoked with a grace: its processes are stopped at the deadline


@dataclass(frozen=True, slots=True)
class Notice:
    """One thing to tell one user; `seq` is its place in the feed once recorded."""

    uid: int
    user: str
    kind: NoticeKind
    key: str
    at: float
    title: str
    body: str
    lease_id: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    seq: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "uid": self.uid,
            "user": self.user,
            "kind": self.kind.value,
            "key": self.key,
            "at": self.at,
            "lease_id": self.lease_id,
            "title": self.title,
            "body": self.body,
            "data": dict(self.data),
        }

    def data_text(self) -> str:
        return json.dumps(dict(self.data), sort_keys=True)


def _shown(text: str | None) -> str:
    """User-controlled text as a notice shows it: escaped, on one line, cut short."""
    shown = escape_unprintable(text or "")
    return shown if len(shown) <= LABEL_SHOWN else shown[: LABEL_SHOWN - 1] + "…"


def _rounded(seconds: float) -> float:
    """Time left as a warning says it: to the minute from two minutes, else to 10 s (a timer
    that ticks a moment after the mark still says "in 15m", "in 1m")."""
    step = 60.0 if seconds >= 120 else 10.0
    return max(0.0, round(seconds / step) * step)


def _clock(at: float) -> str:
    return time.strftime("%H:%M", time.localtime(at))


def _gpus(lease: Lease) -> str:
    indices = sorted({g.index for g in lease.gpus})
    noun = "GPU" if len(indices) == 1 else "GPUs"
    return f"{noun} {', '.join(str(i) for i in indices)}"


def _lease_name(lease: Lease) -> str:
    label = _shown(lease.label)
    return f"lease {lease.id} ({label})" if label else f"lease {lease.id}"


def _lease_data(lease: Lease) -> dict[str, Any]:
    return {
        "lease_id": lease.id,
        "gpus": sorted({g.index for g in lease.gpus}),
        "label": _shown(lease.label) or None,
        "expires_at": lease.expires_at,
    }


def granted_notice(lease: Lease) -> Notice | None:
    """A grant after a wait (a grant at once is answered to someone at the terminal)."""
    if lease.waited_seconds <= 0:
        return None
    waited = typed_duration(lease.waited_seconds)
    return Notice(
        uid=lease.owner_uid,
        user=lease.owner_name,
        kind=NoticeKind.GRANTED,
        key=f"granted:{lease.id}",
        at=lease.created_at,
        lease_id=lease.id,
        title=f"{_gpus(lease)} granted: {_lease_name(lease)}",
        body=f"after a wait of {waited}; it expires at {_clock(lease.expires_at)} unless renewed",
        data={**_lease_data(lease), "waited_seconds": lease.waited_seconds},
    )


def end_notice(lease: Lease, actor_uid: int, detail: str | None) -> Notice | None:
    """An end the owner did not ask for: a revoke, an expiry, the last process's exit, an
    end by root. None for an owner's own free."""
    if lease.state is LeaseState.FREED and actor_uid == lease.owner_uid:
        return None
    revoked = lease.state in (LeaseState.REVOKED, LeaseState.PREEMPTED)
    kind = NoticeKind.REVOKED if revoked else NoticeKind.ENDED
    how = {
        LeaseState.REVOKED: "revoked",
        LeaseState.EXPIRED: "expired",
        LeaseState.PREEMPTED: "preempted",
    }.get(lease.state, "ended")
    why = _shown(detail) if detail else ("its TTL ran out" if how == "expired" else "")
    body = f"{_gpus(lease)} free again" + (f": {why}" if why else "")
    return Notice(
        uid=lease.owner_uid,
        user=lease.owner_name,
        kind=kind,
        key=f"end:{lease.id}",
        at=lease.ended_at if lease.ended_at is not None else lease.expires_at,
        lease_id=lease.id,
        title=f"{_lease_name(lease)} {how}",
        body=body,
        data={**_lease_data(lease), "state": lease.state.value, "detail": why or None},
    )


_ENDING_WHAT = {
    EndingReason.EXPIRY: "expires",
    EndingReason.IDLE_RECLAIM: "may be reclaimed (idle)",
    EndingReason.RESERVATION: "ends for a reservation",
    EndingReason.PREEMPTION: "is preempted",
    EndingReason.REVOKE: "was revoked: its processes are stopped",
}
_ENDING_ADVICE = {
    EndingReason.EXPIRY: "renew it (gpuallocctl renew) or save your work",
    EndingReason.IDLE_RECLAIM: "use its GPUs or free it; it is taken only for someone waiting",
    EndingReason.RESERVATION: "it cannot be renewed past the reservation's start; save your work",
    EndingReason.PREEMPTION: (
        "save a checkpoint and acknowledge it (gpuallocctl checkpoint-done PATH): it ends "
        "then, or at the deadline"
    ),
    EndingReason.REVOKE: "SIGTERM now, SIGKILL then; save what you can",
}


def ending_notice(
    lease: Lease,
    reason: EndingReason,
    *,
    deadline: float,
    left: float,
    threshold: float,
    epoch: str,
    now: float,
    why: str = "",
) -> Notice:
    """A lease's coming end at `deadline` (wall clock), `left` seconds from now: once per
    lease, reason, deadline (`epoch`: what names it across a restart) and threshold."""
    left_text = typed_duration(_rounded(left))
    cause = f" ({_shown(why)})" if why else ""
    return Notice(
        uid=lease.owner_uid,
        user=lease.owner_name,
        kind=NoticeKind.ENDING,
        key=f"ending:{lease.id}:{reason.value}:{epoch}:{threshold:g}",
        at=now,
        lease_id=lease.id,
        title=f"{_lease_name(lease)} {_ENDING_WHAT[reason]} in {left_text}",
        body=f"at {_clock(deadline)}{cause}: {_ENDING_ADVICE[reason]}",
        data={
            **_lease_data(lease),
            "reason": reason.value,
            "deadline": deadline,
            "threshold_seconds": threshold,
        },
    )


def budget_notice(
    uid: int,
    user: str,
    *,
    budget: str,
    level: int,
    used: float,
    value: float,
    unit: str,
    slot: int,
    now: float,
) -> Notice:
    """A budget at `level` percent: once per budget, level and window (`slot`)."""
    what = "reached" if level >= 100 else f"at {level} %"
    return Notice(
        uid=uid,
        user=user,
        kind=NoticeKind.BUDGET,
        key=f"budget:{budget}:{level}:{slot}",
        at=now,
        title=f"budget {budget} {what}",
        body=f"{used:.2f} of {value:g} {unit} used"
        + ("; new leases are refused until use falls below it" if level >= 100 else ""),
        data={"budget": budget, "level": level, "used": used, "value": value, "unit": unit},
    )


def unhealthy_notice(lease: Lease, index: int, uuid: str, reason: str, now: float) -> Notice:
    """A GPU of the user's lease turned unhealthy: once per lease and GPU."""
    return Notice(
        uid=lease.owner_uid,
        user=lease.owner_name,
        kind=NoticeKind.GPU_UNHEALTHY,
        key=f"unhealthy:{lease.id}:{uuid}",
        at=now,
        lease_id=lease.id,
        title=f"GPU {index} of {_lease_name(lease)} is unhealthy",
        body=f"{_shown(reason)}: save your work; the GPU is granted to nobody until it is cleared",
        data={**_lease_data(lease), "gpu": index, "uuid": uuid, "reason": _shown(reason)},
    )


def site_unhealthy_notice(index: int, uuid: str, reason: str, now: float) -> Notice:
    """For the site's channels: a GPU turned unhealthy (once per GPU and day)."""
    return Notice(
        uid=SITE_UID,
        user="site",
        kind=NoticeKind.GPU_UNHEALTHY,
        key=f"gpu-unhealthy:{uuid}:{int(now // 86400)}",
        at=now,
        title=f"GPU {index} is unhealthy",
        body=f"{_shown(reason)} ({uuid})",
        data={"gpu": index, "uuid": uuid, "reason": _shown(reason)},
    )


def unleased_notice(
    uid: int, user: str, *, record: int, pid: int, command: str, where: str, now: float
) -> Notice:
    """A process of the user's found on a GPU they hold no lease on (once per record)."""
    return Notice(
        uid=uid,
        user=user,
        kind=NoticeKind.UNLEASED_USE,
        key=f"unleased:{record}",
        at=now,
        title=f"your process {pid} uses {_shown(where)} without a lease",
        body=f"{_shown(command)}: take a lease (gpuallocctl adopt) or stop it",
        data={"pid": pid, "command": _shown(command), "where": _shown(where)},
    )
