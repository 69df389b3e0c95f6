"""GPU use without a lease, acted on at each live sample: the processes found, what the pure
decision (`enforcement/decide.py`) says, and doing it: the record, the holder's history
event, the log line, the signal, the adoption.

Runs in the serial worker after each sample, like every allocator call. Only processes whose
owner holds no lease on their unit are looked up in /proc.
"""

from __future__ import annotations

import collections
import logging
import signal
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.node_view import NodeView
from gpuallocd.allocator.leases.sharing import UnitHolders
from gpuallocd.allocator.site.drain import DrainBoard
from gpuallocd.allocator.unleased.adoption import ADOPTED_POLICY, Adoption, unit_of
from gpuallocd.enforcement import Action, Seen, Step, Track, UnitUse, UnleasedRules, decide
from gpuallocd.enforcement.proc_facts import Owner, owner_and_start, owner_of, proc_facts
from gpuallocd.errors import CallerError, CapacityError
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller, Gpu, GpuProcess, Lease, LeaseEvent
from gpuallocd.processes.signals import send_signal

__all__ = ["UnleasedGuard", "unit_uses"]

log = logging.getLogger(__name__)

Signal = Callable[[int, int | None, int], bool]


def _gpu_units(
    gpu: Gpu, holders: UnitHolders, open_: Callable[[str], bool]
) -> Iterator[tuple[str, UnitUse]]:
    instances = [m.uuid for m in gpu.mig_devices] if gpu.mig_mode else []
    for uuid in instances:
        lease = holders.instances.get(uuid)
        held = frozenset({lease.owner_uid}) if lease else frozenset()
        yield uuid, UnitUse(held, (lease.id,) if lease else (), adoptable=not held and open_(uuid))
    owners = frozenset(holders.owners_on(gpu.uuid, instances))
    leases = [
        holders.whole.get(gpu.uuid),
        *(lease for lease, _ in holders.shares.get(gpu.uuid, [])),
    ]
    leases += [holders.instances.get(uuid) for uuid in instances]
    ids = tuple(dict.fromkeys(lease.id for lease in leases if lease is not None))
    whole = not owners and not gpu.mig_mode and open_(gpu.uuid)
    yield gpu.uuid, UnitUse(owners, ids, adoptable=whole)


def unit_uses(
    leases: Iterable[Lease], node: NodeView, drains: DrainBoard, reserved: frozenset[str]
) -> dict[str, UnitUse]:
    """Who may use each GPU and MIG instance now, and which could be adopted."""
    holders = UnitHolders.of(leases)
    drained = frozenset(drains.covered(node.topology))
    uses: dict[str, UnitUse] = {}
    for gpu in node.topology.gpus:
        healthy = node.live(gpu.uuid).healthy and gpu.uuid not in drained

        def open_(uuid: str, healthy: bool = healthy) -> bool:
            return healthy and uuid not in reserved

        uses.update(_gpu_units(gpu, holders, open_))
    return uses


class UnleasedGuard:
    """Finds, records and acts on GPU use without a lease; remembers what it saw last."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        ledger: Ledger,
        rules: UnleasedRules,
        clock: Callable[[], float],
        *,
        node: NodeView,
        drains: DrainBoard,
        adoption: Adoption,
        send: Signal = send_signal,
    ) -> None:
        """The parts it reads: the node's last sample (who runs where), the drains (no
        adoption on a drained GPU), and the adoption it makes with (adoption.py)."""
        self._lifecycle = lifecycle
        self._node = node
        self._drains = drains
        self._adoption = adoption
        self._ledger = ledger
        self.rules = rules
        self._clock = clock
        self._send = send
        self._tracks: dict[tuple[int, int | None, str], Track] = {}  # (pid, start, unit)
        self._seen: dict[tuple[int, int | None, str], Seen] = {}
        self._revoked: dict[tuple[int, int | None], None] = {}  # adopted, then revoked
        self._odd: set[tuple[int, str]] = set()  # (pid, what went wrong), logged once
        self.counts: collections.Counter[str] = collections.Counter()

    def check(self, reserved: frozenset[str] = frozenset()) -> list[Lease]:
        """Act on the last sample; the leases adopted (their processes are to be watched)."""
        if not self.rules.active:
            self._tracks, self._seen = {}, {}
            return []
        uses = unit_uses(self._lifecycle.leases(), self._node, self._drains, reserved)
        seen = list(self._candidates(uses))
        now = self._clock()
        for process in seen:  # a revoked adoption is never made again, on any unit
            if process.key[:2] in self._revoked:
                track = self._tracks.get(process.key) or Track(now)
                self._tracks[process.key] = replace(track, adopt_refused=True)
        actions, tracks = decide(seen, uses, self._tracks, self.rules, now)
        self._tracks, self._seen = tracks, {s.key: s for s in seen if s.key in tracks}
        adopted = []
        for action in actions:
            try:
                lease = self._act(action, now, reserved)
            except Exception as exc:  # one odd process never stops the others' actions
                self._log_odd(action.seen.pid, f"{action.step.value}: {exc!r}")
                continue
            if lease is not None:
                adopted.append(lease)
        return adopted

    def _candidates(self, uses: dict[str, UnitUse]) -> Iterator[Seen]:
        """The processes whose owner holds no lease on their unit, described from /proc (each
        on its own: one that cannot be described is logged once and left out)."""
        for gpu in self._node.topology.gpus:
            for process in self._node.live(gpu.uuid).processes:
                unit = unit_of(gpu, process)
                if process.uid is not None and process.uid in uses[unit].holders:
                    continue
                try:
                    seen = self._describe(gpu, unit, process)
                except Exception as exc:
                    self._log_odd(process.pid, f"cannot be described: {exc!r}")
                    continue
                if seen is not None:
                    yield seen

    def _log_odd(self, pid: int, what: str) -> None:
        if (pid, what) not in self._odd:
            if len(self._odd) > 4096:
                self._odd.clear()
            self._odd.add((pid, what))
            log.error("unleased GPU use: pid %d %s", pid, what)

    def _describe(self, gpu: Gpu, unit: str, process: GpuProcess) -> Seen | None:
        facts = proc_facts(process.pid, programs=self.rules.exempt_commands)
        if facts is None or facts.start_time is None:
            return None  # gone since the sample (exited: a zombie until its parent reaps it)
        owner = self._owner(process.uid)
        return Seen(
            pid=process.pid,
            start_time=facts.start_time,
            uid=process.uid,
            user=owner.user if owner else "unknown",
            command=facts.command,
            argv0=facts.argv0,
            gpu_uuid=gpu.uuid,
            gpu_index=gpu.index,
            unit_uuid=unit,
            groups=owner.groups if owner else frozenset(),
            program=facts.program,
        )

    def _owner(self, uid: int | None) -> Owner | None:
        return owner_of(uid)

    def covered(self, leases: list[Lease]) -> list[Lease]:
        """Leases were just adopted: their owners' processes on them offend no more."""
        for lease in leases:
            for key, seen in list(self._seen.items()):
                if seen.uid == lease.owner_uid and seen.unit_uuid in lease.uuids:
                    del self._seen[key]
                    self._tracks.pop(key, None)
        return leases

    def revoked(self, lease: Lease) -> Lease:
        """A lease was revoked: if it was adopted, its process is never adopted again (it is
        stopped by the revoke; while it runs on, it counts as unleased use, without a lease)."""
        if lease.policy == ADOPTED_POLICY and lease.pid is not None:
            if len(self._revoked) >= 4096:
                self._revoked.pop(next(iter(self._revoked)))
            self._revoked[(lease.pid, lease.pid_start_time)] = None
        return lease

    def reload(self, rules: UnleasedRules) -> None:
        """Adopt reloaded rules (SIGHUP)."""
        self.rules = rules

    # Acting ----------------------------------------------------------------------------------

    def _act(self, action: Action, now: float, reserved: frozenset[str]) -> Lease | None:
        seen = action.seen
        if action.step is Step.ADOPT:
            return self._adopt(action, now, reserved)
        if action.step is Step.REPORT:
            self._report(action, now, seen.describe())
            return None
        sig = signal.SIGTERM if action.step is Step.TERMINATE else signal.SIGKILL
        try:
            sent = self._send(seen.pid, seen.start_time, sig)
        except PermissionError:  # not allowed to signal it: reported, never acted on
            sent = False
        if sent:
            name = signal.Signals(sig).name
            self._record(action.step.value, seen, now, f"{seen.describe()}: sent {name}")
        return None

    def _report(self, action: Action, now: float, detail: str) -> None:
        self._record(Step.REPORT.value, action.seen, now, detail, lease_ids=action.lease_ids)
        for lease_id in action.lease_ids:
            self._lifecycle.note(lease_id, LeaseEvent.UNLEASED_USE, action.seen.describe())

    def _adopt(self, action: Action, now: float, reserved: frozenset[str]) -> Lease | None:
        seen = action.seen
        owner = self._owner(seen.uid)
        if owner is None or seen.start_time is None:
            return None  # decide adopts only those; never on a guess
        if owner_and_start(seen.pid) != (seen.uid, seen.start_time):
            return None  # another process has the pid now, or it is gone
        caller = Caller(owner.uid, owner.gid, seen.pid, owner.user, owner.groups)
        detail = f"pid {seen.pid} of {seen.user} ({seen.command}) was using {seen.where}"
        try:
            lease = self._adoption.adopt(
                caller,
                seen.unit_uuid,
                pid=seen.pid,
                started=seen.start_time,
                now=now,
                detail=detail,
                reserved=reserved,
            )
        except (CallerError, CapacityError) as exc:  # refused before anything was written
            self._tracks[seen.key] = Track(now, reported=True, adopt_refused=True)
            self._seen[seen.key] = seen
            self._report(action, now, f"{seen.describe()}; not adopted: {exc.message}")
            return None
        self._record(Step.ADOPT.value, seen, now, f"{detail}: now lease {lease.id}", (lease.id,))
        return lease

    def _record(
        self, what: str, seen: Seen, now: float, detail: str, lease_ids: tuple[str, ...] = ()
    ) -> None:
        log.warning("unleased GPU use: %s", detail)
        self.counts[what] += 1
        self._ledger.record_unleased(
            {
                "at": now,
                "action": what,
                "gpu_uuid": seen.gpu_uuid,
                "unit_uuid": seen.unit_uuid,
                "pid": seen.pid,
                "uid": seen.uid,
                "user": seen.user,
                "command": seen.command,
                "lease_id": lease_ids[0] if lease_ids else None,
                "detail": detail,
            }
        )

    # Views -----------------------------------------------------------------------------------

    def offenders(self) -> list[dict[str, Any]]:
        """The processes using a unit without a lease at the last sample, as `status` shows."""
        found = []
        for key, seen in self._seen.items():
            track = self._tracks[key]
            found.append(
                {
                    "pid": seen.pid,
                    "uid": seen.uid,
                    "user": seen.user,
                    "command": seen.command,
                    "gpu_uuid": seen.gpu_uuid,
                    "gpu_index": seen.gpu_index,
                    "unit_uuid": seen.unit_uuid,
                    "since": track.first_seen,
                    "signalled": "SIGKILL"
                    if track.killed
                    else "SIGTERM"
                    if track.terminated_at is not None
                    else None,
                    "message": seen.describe(),
                }
            )
        return sorted(found, key=lambda o: (o["gpu_index"], o["pid"]))
