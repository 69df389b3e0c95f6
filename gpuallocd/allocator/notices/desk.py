"""The façade's part for notices: the per-user feed, its long poll, each user's thresholds,
the timer of lease endings ahead, and the delivery reports of users' notifiers.

Grants after a wait and ends the owner did not ask for are recorded by the ledger in the
transaction of the transition itself (ledger/notice_records.py). What is written here comes
from the daemon's own clock and samples: a lease's coming end at the owner's thresholds (the
`EndingAhead` heap: the work is that of the leases whose threshold is due), budgets at 80 % and
100 % (budget_watch.py), a GPU of the user's lease unhealthy, a process of theirs on a GPU
without a lease; each in one transaction with the lease's history note where it has one.

The feed is read by its own user only (the caller's uid from the kernel); root may read all.
A long poll is woken after the commit of a notice for its reader, never before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gpuallocd.allocator.bells import LeaseBells
from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import NodeView
from gpuallocd.allocator.notices.ahead import Deadline, EndingAhead, Warning
from gpuallocd.allocator.notices.budget_watch import BudgetWatch
from gpuallocd.allocator.notices.endings import (
    expiry_deadline,
    idle_deadline,
    reservation_deadline,
)
from gpuallocd.allocator.site.idle import IdleTracker
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.site.reservation_board import ReservationBoard
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.errors import InvalidRequest, PermissionDenied
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller, Lease, LeaseEvent
from gpuallocd.model.notice import (
    DEFAULT_THRESHOLDS,
    SITE_UID,
    EndingReason,
    Notice,
    ending_notice,
    site_unhealthy_notice,
    unhealthy_notice,
    unleased_notice,
)
from gpuallocd.text import escape_unprintable

__all__ = [
    "CHANNEL_KINDS",
    "MAX_CHANNELS",
    "MAX_FEED_LIMIT",
    "MAX_THRESHOLDS",
    "NoticeDesk",
]

log = logging.getLogger(__name__)

MAX_THRESHOLDS = 5
MIN_THRESHOLD_SECONDS = 10.0
MAX_THRESHOLD_SECONDS = 7 * 86400.0
MAX_FEED_LIMIT = 500
MAX_CHANNELS = 16  # delivery reports kept per user
MAX_ERROR_LENGTH = 300
CHANNEL_KINDS = ("desktop", "webhook", "mail", "ntfy")
_CHANNEL_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,47}")
PURGE_EVERY_SECONDS = 3600.0
PURGE_BATCH = 5000
EVERYONE = "*"  # the bell of those who read every feed (root)
DEFAULT_RETENTION_SECONDS = 7 * 86400.0  # notify_retention_days' default


class NoticeDesk:
    """The feed and what writes it; also a lease observer (grants arm, ends disarm)."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        ledger: Ledger,
        worker: SerialWorker,
        clock: Callable[[], float],
        idle: IdleTracker,
        *,
        node: NodeView,
        quota: Quota,
        reservations: ReservationBoard,
        retention_seconds: float = DEFAULT_RETENTION_SECONDS,
    ) -> None:
        """The parts it reads: the node's live state (unhealthy GPUs), the quota's budgets,
        the reservations that end leases. `retention_seconds`: how long a notice is kept
        (`notify_retention_days`)."""
        self._lifecycle = lifecycle
        self._node = node
        self._board = reservations
        self._ledger = ledger
        self._worker = worker
        self._clock = clock
        self._idle = idle
        self._bells = LeaseBells()  # by uid as text, and EVERYONE
        self._ahead = EndingAhead(lifecycle.monotonic)
        self._budgets = BudgetWatch(quota, clock)
        self._thresholds: dict[int, tuple[float, ...]] = {}
        self._reservations: set[str] = set()
        self._idle_armed: dict[str, float] = {}
        self._spells: dict[str, float] = {}  # idle spells as the ledger keeps them
        self._unhealthy: set[str] = set()  # GPUs told to the site as unhealthy
        self._unleased_seen = 0
        self._to_ring: set[int] = set()
        self._purged_before: float | None = None
        self._next_purge = 0.0
        self.retention_seconds = retention_seconds

    # Thresholds --------------------------------------------------------------------------------

    def thresholds_of(self, uid: int) -> tuple[float, ...]:
        return self._thresholds.get(uid, DEFAULT_THRESHOLDS)

    def settings(self, caller: Caller) -> dict[str, Any]:
        own = self._thresholds.get(caller.uid)
        return {
            "thresholds_seconds": list(own or DEFAULT_THRESHOLDS),
            "default": own is None,
            "default_thresholds_seconds": list(DEFAULT_THRESHOLDS),
            "retention_seconds": self.retention_seconds,
        }

    async def set_thresholds(self, caller: Caller, seconds: Sequence[float] | None) -> None:
        """The caller's own thresholds (None or empty: back to the defaults)."""
        chosen = _checked_thresholds(seconds) if seconds else DEFAULT_THRESHOLDS
        await self._worker.run(
            self._ledger.set_notify_thresholds, caller.uid, chosen, self._clock()
        )
        self._thresholds[caller.uid] = chosen
        for lease in await self._worker.run(self._lifecycle.leases):
            if lease.owner_uid == caller.uid:
                self._arm_lease(lease, span=None)

    # The feed ----------------------------------------------------------------------------------

    async def feed(
        self, caller: Caller, after: int, wait_seconds: float, limit: int, everyone: bool = False
    ) -> dict[str, Any]:
        """The caller's notices numbered above `after` (everyone's for root with `everyone`);
        with none yet, wait up to `wait_seconds` for one."""
        if everyone and not caller.is_root:
            raise PermissionDenied("only root may read every user's notices")
        if not 1 <= limit <= MAX_FEED_LIMIT:
            raise InvalidRequest(f"limit must be from 1 to {MAX_FEED_LIMIT}", field="limit")
        uid = None if everyone else caller.uid
        return await self.read(uid, after, wait_seconds, limit)

    async def read(
        self, uid: int | None, after: int, wait_seconds: float, limit: int = MAX_FEED_LIMIT
    ) -> dict[str, Any]:
        """The feed of `uid` (None: all); for the API and the site's channels."""
        name = EVERYONE if uid is None else str(uid)
        bell = self._bells.listen(name)  # before the read: no notice slips between
        try:
            found, last = await self._worker.run(self._read_feed, uid, after, limit)
            if not found and wait_seconds > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(bell), wait_seconds)
                found, last = await self._worker.run(self._read_feed, uid, after, limit)
        finally:
            self._bells.forget(name, bell)
        return {
            "notices": [n.to_json() for n in found],
            "next": found[-1].seq if found else after,
            "last": last,
            "more": len(found) == limit,
            "kept_since": self._purged_before,
            "retention_seconds": self.retention_seconds,
        }

    def _read_feed(self, uid: int | None, after: int, limit: int) -> tuple[list[Notice], int]:
        return self._ledger.notices_after(uid, after, limit), self._ledger.last_notice_seq()

    def stop(self) -> None:
        """The daemon stops: long polls answer now."""
        self._bells.ring_all()

    def _ring(self, uids: Iterable[int]) -> None:
        self._bells.ring([*(str(uid) for uid in set(uids)), EVERYONE])

    # Delivery reports --------------------------------------------------------------------------

    async def report(
        self, caller: Caller, channel: str, kind: str, ok: bool, error: str | None
    ) -> None:
        """The caller's notifier delivered (or failed to deliver) to one of their channels."""
        if not _CHANNEL_ID.fullmatch(channel):
            raise InvalidRequest("channel must be 1-48 of a-z, 0-9 and -", field="channel")
        if kind not in CHANNEL_KINDS:
            raise InvalidRequest(f"kind must be one of {', '.join(CHANNEL_KINDS)}", field="kind")
        shown = None if error is None else escape_unprintable(error)[:MAX_ERROR_LENGTH]
        await self._worker.run(self._report, caller.uid, channel, kind, ok, shown)

    def _report(self, uid: int, channel: str, kind: str, ok: bool, error: str | None) -> None:
        known = {r["channel"] for r in self._ledger.delivery_reports(uid)}
        if channel not in known and len(known) >= MAX_CHANNELS:
            raise InvalidRequest(f"at most {MAX_CHANNELS} channels per user", field="channel")
        self._ledger.record_delivery(uid, channel, kind, ok, error, self._clock())

    async def forget_channel(self, caller: Caller, channel: str) -> None:
        await self._worker.run(self._ledger.forget_channel, caller.uid, channel)

    async def reports(self, caller: Caller, everyone: bool = False) -> list[dict[str, Any]]:
        if everyone and not caller.is_root:
            raise PermissionDenied("only root may read every user's delivery reports")
        return await self._worker.run(
            self._ledger.delivery_reports, None if everyone else caller.uid
        )

    async def failing(self) -> dict[str, Any]:
        """For `doctor`: channels whose last delivery failed (no target, no secret: the kind,
        the user, the error); the dashboard reads the same on its own connection."""
        rows = await self._worker.run(self._ledger.delivery_reports, None)
        failing = await self._worker.run(self._ledger.failing_channels)
        return {"channels": len(rows), "failing": failing}

    # A lease observer (allocator/observer.py): after the commit -------------------------------

    def lease_granted(self, lease: Lease) -> None:
        self._arm_lease(lease, span=lease.expires_at - lease.created_at)
        self._budgets.touched(lease.owner_uid)
        self._ring((lease.owner_uid,))  # a grant after a wait is in the feed

    def lease_ended(self, lease: Lease) -> None:
        self._ahead.disarm(lease.id)
        self._idle_armed.pop(lease.id, None)
        self._budgets.touched(lease.owner_uid)
        self._ring((lease.owner_uid,))

    def commit_published(self) -> None:
        return None

    def allocation_finished(self, seconds: float, *, waited: bool, outcome: str) -> None:
        return None

    def renewed(self, lease: Lease) -> None:
        """A renewal moves the expiry: its thresholds count from the new TTL."""
        deadline = expiry_deadline(self._lifecycle, lease)
        if deadline is not None:
            span = lease.expires_at - self._clock()
            thresholds = self.thresholds_of(lease.owner_uid)
            self._ahead.arm(lease.id, EndingReason.EXPIRY, deadline, thresholds, span=span)

    def _arm_lease(self, lease: Lease, span: float | None) -> None:
        thresholds = self.thresholds_of(lease.owner_uid)
        deadline = expiry_deadline(self._lifecycle, lease)
        if deadline is not None:
            self._ahead.arm(lease.id, EndingReason.EXPIRY, deadline, thresholds, span=span)
        found = reservation_deadline(self._board, lease, self._clock())
        if found is not None:
            reserved, reserved_span = found
            self._ahead.arm(
                lease.id, EndingReason.RESERVATION, reserved, thresholds, span=reserved_span
            )

    # Preemption and revoke with a grace --------------------------------------------------------

    def preempting(self, lease: Lease, deadline: Deadline, told: float) -> None:
        """A lease is preempted (allocator/preemption/): warn at `told` (the lead plus the grace:
        its first warning, written with the decision, so this one adds nothing) and at each of
        the owner's thresholds below it, once each across restarts (span: always)."""
        own = [t for t in self.thresholds_of(lease.owner_uid) if t < told]
        self._ahead.arm(lease.id, EndingReason.PREEMPTION, deadline, (told, *own), span=math.inf)

    def warn_revoke(self, lease: Lease, grace_seconds: float) -> list[int]:
        """Runs in the worker, in the revoke's transaction: a lease whose processes are stopped
        after a grace (SIGTERM now, SIGKILL then) is warned of that end, once (its key); the
        owners to ring after the commit."""
        now = self._clock()
        notice = ending_notice(
            lease,
            EndingReason.REVOKE,
            deadline=now + grace_seconds,
            left=grace_seconds,
            threshold=grace_seconds,
            epoch=f"{now:.0f}",
            now=now,
        )
        if not self._ledger.add_notices([notice]):
            return []
        self._lifecycle.note(lease.id, LeaseEvent.ENDING, f"{notice.title}: {notice.body}")
        return [lease.owner_uid]

    def ring_owners(self, uids: Iterable[int]) -> None:
        """After a commit that told `uids` something: wake their readers."""
        self._ring(uids)

    # Start, ticks and samples ------------------------------------------------------------------

    async def start(self) -> None:
        """Read the thresholds; arm the active leases, each with the TTL of its last grant or
        renewal, so a threshold passed while the daemon was down is told now (once)."""
        self._thresholds = await self._worker.run(self._ledger.notify_thresholds)
        self._unleased_seen = await self._worker.run(self._ledger.last_unleased_seq)
        leases = await self._worker.run(self._lifecycle.leases)
        renewed = await self._worker.run(self._ledger.last_renewals, [x.id for x in leases])
        for lease in leases:
            self._arm_lease(lease, span=lease.expires_at - renewed.get(lease.id, lease.created_at))
        self._reservations = {r.id for r in self._board.live(self._clock())}
        self._spells = await self._worker.run(self._ledger.idle_spells)

    async def tick(self) -> None:
        """Tell what is due: thresholds, budgets; purge notices past their retention."""
        self._new_reservations()
        warnings = self._ahead.due()
        if warnings:
            self._ring(await self._worker.run(self._warn, warnings))
        for uid in self._budgets.due():
            self._ring(await self._worker.run(self._check_budget, uid))
        if self._clock() >= self._next_purge:
            self._next_purge = self._clock() + PURGE_EVERY_SECONDS
            await self._purge()

    def _new_reservations(self) -> None:
        """A reservation made since: arm the leases it will end (few: admins make them)."""
        now = self._clock()
        live = self._board.live(now)
        fresh = [r for r in live if r.id not in self._reservations]
        self._reservations = {r.id for r in live}
        for reservation in fresh:
            for lease in self._lifecycle.active_leases():
                found = reservation_deadline(self._board, lease, now, only=reservation)
                current = self._ahead.armed(lease.id, EndingReason.RESERVATION)
                if found is not None and (current is None or found[0].wall < current.wall):
                    thresholds = self.thresholds_of(lease.owner_uid)
                    deadline, span = found  # from when it was made: a tick may come late
                    self._ahead.arm(
                        lease.id, EndingReason.RESERVATION, deadline, thresholds, span=span
                    )

    def _warn(self, warnings: list[Warning]) -> list[int]:
        """Runs in the worker: each warning of a lease still active, with its history note,
        in one transaction; the owners told."""
        told: list[int] = []
        now = self._clock()
        with self._ledger.unit_of_work():
            for warning in warnings:
                lease = self._lifecycle.lease(warning.lease_id)
                if not lease.active or not self._still_ends(lease, warning):
                    continue
                notice = _ending(lease, warning, now)
                if self._ledger.add_notices([notice]):
                    detail = f"{notice.title}: {notice.body}"
                    self._lifecycle.note(lease.id, LeaseEvent.ENDING, detail)
                    told.append(lease.owner_uid)
        return told

    def _still_ends(self, lease: Lease, warning: Warning) -> bool:
        """A reservation cancelled since it was armed ends nothing."""
        if warning.reason is not EndingReason.RESERVATION:
            return True
        live = {r.id for r in self._board.live(self._clock())}
        return warning.deadline.epoch in live

    def _check_budget(self, uid: int) -> list[int]:
        notices = self._budgets.check(uid, self._lifecycle.leases())
        return [uid] if notices and self._ledger.add_notices(notices) else []

    def after_sample(self, unhealthy: list[tuple[Lease, dict[str, object]]]) -> None:
        """Runs in the worker, in the sample's transaction: GPUs of leases turned unhealthy
        (told once per lease and GPU by HealthNotices), the site told of each unhealthy GPU,
        and owners of processes found on GPUs without a lease."""
        now = self._clock()
        notices = [
            unhealthy_notice(lease, int(str(g["index"])), str(g["uuid"]), str(g["reason"]), now)
            for lease, g in unhealthy
        ]
        notices += self._site_unhealthy(now)
        notices += self._unleased(now)
        if notices:
            self._to_ring.update(n.uid for n in self._ledger.add_notices(notices))

    def ring_sampled(self) -> None:
        """After the sample's commit: wake the readers of what it told."""
        told, self._to_ring = self._to_ring, set()
        if told:
            self._ring(told)

    def _site_unhealthy(self, now: float) -> list[Notice]:
        notices, unhealthy = [], set()
        for gpu in self._node.topology.gpus:
            live = self._node.live(gpu.uuid)
            if not live.healthy:
                unhealthy.add(gpu.uuid)
                if gpu.uuid not in self._unhealthy:
                    reason = live.health_reason or "unhealthy"
                    notices.append(site_unhealthy_notice(gpu.index, gpu.uuid, reason, now))
        self._unhealthy = unhealthy
        return notices

    def _unleased(self, now: float) -> list[Notice]:
        rows = self._ledger.unleased_after(self._unleased_seen)
        if rows:
            self._unleased_seen = rows[-1]["seq"]
        return [
            unleased_notice(
                r["uid"],
                r["user"],
                record=r["seq"],
                pid=r["pid"],
                command=r["command"],
                where=f"GPU {r['unit_uuid']}",
                now=now,
            )
            for r in rows
            if r["uid"] is not None and r["action"] in ("reported", "terminated")
        ]

    async def idle_changed(self) -> None:
        """After the idle tracker saw a sample: arm the leases that became idle, take back
        those that are busy again (or ended); each spell kept in the ledger, so its warnings
        keep their name across a restart."""
        spells = self._idle.idle_leases()
        await self._keep_spells(spells)
        for lease_id in [i for i in self._idle_armed if i not in spells]:
            self._ahead.disarm(lease_id, EndingReason.IDLE_RECLAIM)
            del self._idle_armed[lease_id]
        now = self._clock()
        for lease_id, since in spells.items():
            if self._idle_armed.get(lease_id) == since:
                continue
            found = idle_deadline(self._idle.rules, since, now, self._spells[lease_id])
            lease = self._lifecycle.active(lease_id)
            if found is None or lease is None:
                continue
            deadline, span = found
            self._idle_armed[lease_id] = since
            thresholds = self.thresholds_of(lease.owner_uid)
            self._ahead.arm(lease_id, EndingReason.IDLE_RECLAIM, deadline, thresholds, span=span)

    async def _keep_spells(self, idle: dict[str, float]) -> None:
        """A spell begins where a lease is idle without one (it goes on where the ledger has
        one from before a restart); it ends where the lease is busy again or gone."""
        begun = {i: since for i, since in idle.items() if i not in self._spells}
        ended = [i for i in self._spells if i not in idle]
        if begun or ended:
            await self._worker.run(self._ledger.change_idle_spells, begun, ended)
            for lease_id in ended:
                del self._spells[lease_id]
            self._spells.update(begun)

    async def _purge(self) -> None:
        cutoff = self._clock() - self.retention_seconds
        while await self._worker.run(self._ledger.purge_notices_before, cutoff, PURGE_BATCH):
            pass
        self._purged_before = cutoff

    # The site's channels -----------------------------------------------------------------------

    async def site_cursor(self) -> int:
        return await self._worker.run(self._ledger.site_cursor)

    async def site_delivered(self, seq: int) -> None:
        await self._worker.run(self._ledger.set_site_cursor, seq)

    async def site_report(self, channel: str, kind: str, ok: bool, error: str | None) -> None:
        await self._worker.run(
            self._ledger.record_delivery, SITE_UID, channel, kind, ok, error, self._clock()
        )


def _ending(lease: Lease, warning: Warning, now: float) -> Notice:
    deadline: Deadline = warning.deadline
    return ending_notice(
        lease,
        warning.reason,
        deadline=deadline.wall,
        left=deadline.left,
        threshold=warning.threshold,
        epoch=deadline.epoch,
        now=now,
        why=deadline.why,
    )


def _checked_thresholds(seconds: Sequence[float]) -> tuple[float, ...]:
    if len(seconds) > MAX_THRESHOLDS:
        raise InvalidRequest(f"at most {MAX_THRESHOLDS} thresholds", field="thresholds_seconds")
    for value in seconds:
        if not MIN_THRESHOLD_SECONDS <= value <= MAX_THRESHOLD_SECONDS:
            raise InvalidRequest(
                f"each threshold must be from {MIN_THRESHOLD_SECONDS:g} s to 7 days",
                field="thresholds_seconds",
            )
    return tuple(sorted({float(v) for v in seconds}, reverse=True))
