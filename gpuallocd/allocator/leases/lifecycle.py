"""The lease lifecycle: grant, renew, free, revoke, expire, and end leases of exited processes.

The one place that decides and records leases. It is synchronous and keeps no lock: the
façade runs every call through the serial worker, one at a time on the event loop, so a
decision and its record are never interleaved with another. The flow of a grant: expire what
is due, check the request, build an immutable snapshot, ask the policy, check its choice,
record the lease in one ledger transaction, and only then update the in-memory view.

It keeps to granting and ending. The parts it grants with (the quota, drains, reservations
board, node view, lease hardware and settings: parts.py) are handed to it, and it keeps them
to itself: a module that reads one is handed it too, by the composition root
(daemon/assembly.py) or the façade, never through the lifecycle (tests/test_architecture.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from gpuallocd.allocator.leases.chooser import Chooser
from gpuallocd.allocator.leases.deadlines import Deadlines
from gpuallocd.allocator.leases.events_log import Transition
from gpuallocd.allocator.leases.node_view import GpuStatus, Hold
from gpuallocd.allocator.leases.parts import SharedParts
from gpuallocd.allocator.leases.request_ids import RequestIds
from gpuallocd.allocator.leases.servable import KeptFrom, check_servable
from gpuallocd.allocator.leases.sharing import share_capacity
from gpuallocd.allocator.leases.slices import leased_units, vanished_units
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.allocator.site.request_bounds import GrantTerms, resolve_terms, ttl_bounds
from gpuallocd.allocator.site.reservation_board import caller_of_uid
from gpuallocd.allocator.site.ttl import TtlBounds, expected_ttl, granted_ttl
from gpuallocd.enforcement.shares import ShareEnforcer
from gpuallocd.errors import (
    CapacityError,
    InvalidRequest,
    LeaseNotActive,
    LedgerError,
    PermissionDenied,
    UnknownLease,
)
from gpuallocd.host.proc import process_start_time
from gpuallocd.ledger import Ledger
from gpuallocd.model import (
    Caller,
    Lease,
    LeasedGpu,
    LeaseEvent,
    LeaseState,
    LiveState,
    Topology,
)
from gpuallocd.model.lease import ENDING_EVENT, new_lease_id
from gpuallocd.policies.rules import request_for

log = logging.getLogger(__name__)

__all__ = ["LeaseLifecycle"]

Clock = Callable[[], float]


def unmoved_seconds(ttl: float) -> float:
    """How little a renewal may move a lease's end and still be no renewal: under a second
    (the history's grain), and under a tenth of a short TTL, so that a client renewing a
    1.5 s lease every half second is recorded each time."""
    return min(1.0, ttl / 10.0)


class LeaseLifecycle:
    """Grants, renews, frees, revokes and expires leases over one node."""

    def __init__(
        self,
        ledger: Ledger,
        parts: SharedParts,
        *,
        clock: Clock,
        start_time_of: Callable[[int], int | None] = process_start_time,
        monotonic: Clock | None = None,
    ) -> None:
        """`parts`: the shared parts it grants with (parts.py: made and handed out by the
        composition root, never reached through the lifecycle); `clock` gives the wall-clock
        times shown to people; `monotonic` (the same clock when not given) decides expiry:
        see `deadlines.py`."""
        settings = parts.settings
        self._ledger = ledger
        self._clock = clock
        self._deadlines = Deadlines(clock, monotonic or clock, settings.max_ttl_seconds)
        self._request_ids = RequestIds(ledger.active_request_ids())
        self._start_time_of = start_time_of
        self._settings = settings
        self._enforcer = ShareEnforcer(settings.share_enforcement, self.note)
        self._node = parts.node
        self._chooser = Chooser(self._node, settings.default_policy)
        self._quota = parts.quota
        self._drains = parts.drains
        self._reservations = parts.reservations
        self._hardware = parts.hardware  # energy and power caps: hardware.py
        self._sync_units(self._node.topology)
        self._active = {lease.id: lease for lease in ledger.active_leases()}
        self._journal: list[Transition] = []  # written to the log after the commit
        self._news: set[str] = set()  # leases with a new history event since the last commit

    # Node -----------------------------------------------------------------------------------

    @property
    def topology(self) -> Topology:
        return self._node.topology

    def set_topology(self, topology: Topology) -> list[Lease]:
        """Adopt a (re)discovered topology and record its GPUs; end the leases of MIG
        instances that vanished (an admin changed the GPU's MIG layout), with the reason."""
        ended: list[Lease] = []
        for lease, reason in vanished_units(self._active.values(), topology):
            ended += self._end([lease], LeaseState.REVOKED, actor_uid=0, detail=reason)
        self._sync_units(topology)
        return ended

    def _sync_units(self, topology: Topology) -> None:
        settings = self._settings
        capacity = share_capacity(
            topology, settings.shared_gpus, settings.share_memory_reserve_bytes
        )
        self._ledger.sync_gpus(topology.gpus, self._clock(), capacity)
        self._node.adopt(topology, capacity)

    def update_live(self, states: Mapping[str, LiveState]) -> None:
        """Take a live sample; with share enforcement on, act on shares over their size."""
        self._node.update_live(states)
        self._hardware.sampled(states, self._active.values(), self._node.topology)
        self._enforcer.check(self._active.values(), states)

    def note(self, lease_id: str, event: LeaseEvent, detail: str) -> None:
        """Record an event of a lease that changes nothing (its holder hears of it)."""
        self._ledger.note(lease_id, event, self._clock(), detail)
        self._news.add(lease_id)

    def reload(self) -> None:
        """Forget the in-memory view and read it again from the ledger (after a failed commit)."""
        self._active = {lease.id: lease for lease in self._ledger.active_leases()}
        self._drains.reload()
        self._reservations.reload()
        self.reload_caps()
        self._journal.clear()  # those transitions were rolled back
        self._news.clear()
        self._request_ids.retain(self._active)

    def reload_caps(self) -> None:
        """Read the power caps and the limits owed back again (at start, after a failed
        commit), and show each active lease the cap its records say it has; the journal
        of transitions not yet published is left as it is."""
        self._hardware.reload(self._ledger, self._active)
        self._active = {i: self._hardware.as_recorded(lease) for i, lease in self._active.items()}

    def take_journal(self) -> tuple[list[Transition], set[str]]:
        """The transitions made since the last call, oldest first (for the events log), and
        the leases that got a history event other than a renewal (for those who wait)."""
        taken, self._journal, news, self._news = self._journal, [], self._news, set()
        return taken, news

    # Queries --------------------------------------------------------------------------------

    def leases(self) -> list[Lease]:
        self.expire_due()
        return sorted(self._active.values(), key=lambda lease: lease.created_at)

    def lease(self, lease_id: str) -> Lease:
        active = self._active.get(lease_id)
        if active is not None and not self._deadlines.passed(active):
            return active
        if active is not None:
            self.expire_due()  # never shown active past its deadline
        found = self._ledger.lease(lease_id)
        if found is None:
            raise UnknownLease(f"no lease {lease_id!r}", lease=lease_id)
        return found

    def gpu_status(self, holds: Mapping[str, Hold] | None = None) -> list[GpuStatus]:
        self.expire_due()
        return self._node.statuses(self._active.values(), holds, self._drains.drains)

    def unexpired_statuses(self) -> list[GpuStatus]:
        """The GPUs as the next expiry would leave them, expiring nothing (a preview's)."""
        return self._node.statuses(self._unexpired(), None, self._drains.drains)

    def _unexpired(self) -> list[Lease]:
        return [lease for lease in self._active.values() if not self._deadlines.passed(lease)]

    def ttl_bounds(self, caller: Caller | None) -> TtlBounds:
        """What bounds `caller`'s lease lifetimes (None: the site's bounds alone)."""
        default, site_max = self._settings.default_ttl_seconds, self._settings.max_ttl_seconds
        if caller is None:
            return TtlBounds(default_seconds=default, site_max_seconds=site_max)
        return ttl_bounds(self._settings.bounds, self._quota.applied(caller))

    def ttl_of(self, spec: AllocateSpec, caller: Caller | None = None) -> float:
        """The lifetime a grant of `spec` to `caller` will get, for estimates (`ttl.py`)."""
        return expected_ttl(self.ttl_bounds(caller), spec.ttl_seconds)

    def active(self, lease_id: str) -> Lease | None:
        """The active lease `lease_id` as the view holds it (no expiry run: a reader's)."""
        return self._active.get(lease_id)

    def active_leases(self) -> list[Lease]:
        """The active leases as the view holds them (no expiry run: a reader's)."""
        return list(self._active.values())

    def time_left(self, lease_id: str) -> float | None:
        """Seconds until an active lease expires, on the monotonic clock that decides it."""
        return self._deadlines.left(lease_id)

    @property
    def monotonic(self) -> Clock:
        """The clock expiry runs on (never set by anyone: deadlines.py)."""
        return self._deadlines.monotonic

    def bound_leases(self) -> list[Lease]:
        return [lease for lease in self._active.values() if lease.bound]

    def is_active(self, lease_id: str) -> bool:
        """Whether the lease is active (as this process knows it, no ledger read)."""
        return lease_id in self._active

    def usable_gpus(self, spec: AllocateSpec, owner_uid: int | None = None) -> frozenset[str]:
        """The GPUs that could serve `spec`, less those its owner holds or may not take now."""
        found = self._node.usable_gpus(spec)
        return found if owner_uid is None else found - self.kept_from()(owner_uid, spec)

    def kept_from(self) -> KeptFrom:
        """What `usable_gpus` takes off for an owner, for many waiters at one moment: the
        GPUs the owner holds, and those advance reservations keep from it for the TTL its
        request would get."""
        now = self._clock()

        def reserved(uid: int, spec: AllocateSpec) -> frozenset[str]:
            ttl = self.ttl_of(spec, caller_of_uid(uid))
            return self._reservations.held_for_uid(uid, now, ttl)

        return KeptFrom(self._active.values(), reserved)

    def check_servable(self, caller: Caller, spec: AllocateSpec) -> None:
        """Refuse a wait that the caller's own leases would make endless."""
        check_servable(self._node, self._active.values(), caller, spec)

    # Changes --------------------------------------------------------------------------------

    def allocate(
        self,
        caller: Caller,
        spec: AllocateSpec,
        *,
        reserved: frozenset[str] = frozenset(),
        waited_since: float | None = None,
    ) -> Lease:
        """Grant a lease now, or raise (QuotaExceeded, GpusUnavailable, GpuBusy, ...) and
        change nothing. `reserved` GPUs are held for earlier waiters: this request may not
        take them; drained ones nobody. `waited_since`: when the request joined the queue."""
        self.expire_due()
        retried = self._retried(caller, spec)
        if retried is not None:
            return retried
        lease = self._decide(caller, spec, self._active.values(), reserved, waited_since)
        lease = self.record_grant(lease, spec.request_id)
        self._request_ids.remember(caller.uid, spec.request_id, lease.id)
        return lease

    def preview(
        self, caller: Caller, spec: AllocateSpec, *, reserved: frozenset[str] = frozenset()
    ) -> Lease:
        """The lease a grant of `spec` would record now, or the error that would refuse it:
        the grant's own checks and choice (`_decide`, then the power budget), with nothing
        written. A lease past its end counts as ended, as the grant's expiry would make it;
        the lease returned is never recorded (its id means nothing). Over the power budget:
        OverBudget (`power/budget.py`), with the refusal and the queue's note."""
        retried = self._retried(caller, spec)
        if retried is not None and not self._deadlines.passed(retried):
            return retried
        active = self._unexpired()
        lease = self._decide(caller, spec, active, reserved, None)
        return self._hardware.fits(active, lease)

    def _decide(
        self,
        caller: Caller,
        spec: AllocateSpec,
        active: Collection[Lease],
        reserved: frozenset[str],
        waited_since: float | None,
    ) -> Lease:
        """The lease a grant would make over the `active` leases, or the error that refuses
        it: the request's bounds, limits, drains, reservations, the policy's checked choice.
        Reads only (the grant records what it returns; the preview shows it)."""
        request = request_for(
            self.topology,
            spec.count,
            spec.gpus,
            spec.min_free_memory_bytes,
            memory_bytes=spec.memory_bytes,
            mig_profile=spec.mig_profile,
        )
        now = self._clock()
        terms = self.terms_of(caller, spec, waited_since, now)
        if request.kind == "whole":  # shares and slices are counted once placed
            self._quota.check_grant(
                caller, active, gpus=request.count, preemptible=spec.preemptible
            )
        self._drains.check_not_drained(request.required, self.topology)
        unavailable = reserved | frozenset(self._drains.covered(self.topology))
        try:
            ttl, (policy_name, choice) = self._reservations.fit(
                caller,
                now,
                terms.ttl_seconds,
                defaulted=spec.ttl_seconds is None,
                wanted=request.required,
                choose=lambda held: self._chooser.choose(active, spec, request, unavailable | held),
            )
        except CapacityError:  # before it waits for GPUs: a power budget it could never fit
            if request.kind == "whole":
                every = [gpu.uuid for gpu in self.topology.gpus]
                self._hardware.check_at_arrival(
                    request.count, terms.power_limit_watts, request.required, every
                )
            raise
        if not choice.exact:
            log.warning(
                "policy %s gave a set it could not prove best: %s", policy_name, choice.reason
            )
        units = leased_units(self.topology, request, choice.gpus)
        if request.kind != "whole":
            self._quota.check_units(caller, active, units, spec.preemptible)
        terms = replace(terms, ttl_seconds=ttl)
        return self._new_lease(caller, spec, policy_name, units, terms, waited_since)

    def policy_of(self, spec: AllocateSpec) -> str:
        """The policy that chooses for `spec`: the one it names, else `default_policy`."""
        return spec.policy or self._settings.default_policy

    def record_grant(self, lease: Lease, request_id: str | None = None) -> Lease:
        """Record a lease decided here or by an adoption (allocator/unleased/adoption.py)."""
        lease, also, caps = self._hardware.granted(self._active.values(), lease, lease.created_at)
        try:
            self._ledger.grant(lease, lease.owner_uid, request_id, also, caps)
        except Exception:
            self._hardware.refused(lease)
            raise
        self._active[lease.id] = lease
        self._journal.append(Transition(LeaseEvent.GRANTED, lease, lease.owner_uid))
        self._deadlines.start(lease.id, lease.expires_at - lease.created_at)
        return lease

    def withdraw(self, lease_id: str, detail: str | None = None) -> list[Lease]:
        """Undo a grant whose answer could not be delivered (the client left, or timed out),
        or whose power cap could not be set (`detail` says why)."""
        lease = self._active.get(lease_id)
        if lease is None:
            return []
        detail = detail or "granted, but the answer could not be delivered"
        return self._end([lease], LeaseState.FREED, actor_uid=0, detail=detail)

    def retried(self, caller: Caller, spec: AllocateSpec) -> Lease | None:
        """The active lease an earlier request with the same id got, if any."""
        return self._retried(caller, spec)

    def _retried(self, caller: Caller, spec: AllocateSpec) -> Lease | None:
        """The active lease an earlier request with the same id got, if any."""
        lease_id = self._request_ids.lease_of(caller.uid, spec.request_id)
        return self._active.get(lease_id) if lease_id is not None else None

    def renew(self, caller: Caller, lease_id: str, ttl_seconds: float | None = None) -> Lease:
        """Move the lease's end to `ttl` from now; a renewal that would move it by less than
        `unmoved_seconds(ttl)` changes nothing and writes nothing (`run` renews as its
        command starts, right after the grant, so that the command's processes are looked
        for at once: that is no renewal for the history)."""
        lease = self._owned_active(caller, lease_id)
        now = self._clock()
        ttl = self._ttl(caller, ttl_seconds)
        self._reservations.check_renewal(caller, lease, now, ttl)
        if abs(now + ttl - lease.expires_at) < unmoved_seconds(ttl):
            return lease
        renewed = replace(lease, expires_at=now + ttl)
        self._ledger.renew(lease.id, renewed.expires_at, caller.uid, now)
        self._active[lease.id] = renewed
        self._deadlines.start(lease.id, ttl)
        return renewed

    def joinable(self, caller: Caller, lease_id: str) -> Lease:
        """The caller's own active bound lease, which a process of theirs may join
        (`Decision.JOINING`): never another user's (root's neither: a process kept alive
        would keep someone else's GPUs), nor a lease tied to no process."""
        lease = self._active_lease(lease_id)
        if lease.owner_uid != caller.uid:
            raise PermissionDenied(
                f"lease {lease_id} belongs to {lease.owner_name}: only its owner's processes "
                "may join it",
                lease=lease_id,
            )
        if not lease.bound:
            raise InvalidRequest(
                f"lease {lease_id} is tied to no process (it lasts until freed, revoked or "
                "expired): there is nothing to join",
                field="lease_id",
                value=lease_id,
            )
        return lease

    def free(self, caller: Caller, lease_id: str) -> Lease:
        lease = self._owned_active(caller, lease_id)
        return self._end([lease], LeaseState.FREED, caller.uid)[0]

    def revoke(self, caller: Caller, lease_id: str, reason: str | None = None) -> Lease:
        """End someone's lease (admins); the admin's name and reason go in the admin record."""
        self._quota.require_admin(caller, "revoke leases", lease=lease_id)
        lease = self._active_lease(lease_id)
        try:
            with self._ledger.unit_of_work():  # the lease's end and the admin record together
                ended = self._end([lease], LeaseState.REVOKED, caller.uid, reason)[0]
                self._ledger.record_revoke(
                    lease_id, caller.uid, caller.user, ended.ended_at or 0, reason
                )
        except LedgerError:
            self.reload()
            raise
        return ended

    def end_preempted(self, lease_id: str, detail: str) -> Lease:
        """End a lease for its preemption (at its checkpoint, or at the deadline)."""
        return self._end([self._active[lease_id]], LeaseState.PREEMPTED, 0, detail)[0]

    def reclaim_idle(self, lease_id: str, detail: str) -> Lease:
        """End an idle lease for someone who waits (the daemon's decision, not a caller's)."""
        return self._end([self._active[lease_id]], LeaseState.REVOKED, 0, detail)[0]

    def end_for_exited_process(self, lease_ids: Sequence[str]) -> list[Lease]:
        """End the bound leases whose holder process exited (those still active)."""
        leases = [self._active[i] for i in lease_ids if i in self._active]
        ended: list[Lease] = []
        for lease in leases:
            detail = f"holder process {lease.pid} exited"
            ended += self._end([lease], LeaseState.FREED, actor_uid=0, detail=detail)
        return ended

    def reconcile_processes(self, has_work: Callable[[str], bool] | None = None) -> list[Lease]:
        """At start: end bound leases whose process died while the daemon was down (unless
        `has_work` says work of the lease was found running)."""
        dead = [
            lease.id
            for lease in self._active.values()
            if lease.bound
            and (lease.pid is None or self._start_time_of(lease.pid) != lease.pid_start_time)
            and not (has_work is not None and has_work(lease.id))
        ]
        return self.end_for_exited_process(dead)

    def expire_due(self) -> list[Lease]:
        """End every lease whose TTL ran out; their GPUs are free again."""
        due = self._deadlines.due(self._active.values())
        if not due:
            return []
        at = {lease.id: self._deadlines.due_at(lease) for lease in due}
        return self._end(due, LeaseState.EXPIRED, actor_uid=0, at=at)

    # Internals ------------------------------------------------------------------------------

    def _new_lease(
        self,
        caller: Caller,
        spec: AllocateSpec,
        policy_name: str,
        units: tuple[LeasedGpu, ...],
        terms: GrantTerms,
        waited_since: float | None,
    ) -> Lease:
        start_time = self._start_time_of(caller.pid) if spec.bind_to_process else None
        if spec.bind_to_process and start_time is None:
            raise InvalidRequest("the requesting process is gone; nothing to bind the lease to")
        now = self._clock()
        return Lease(
            id=new_lease_id(),
            gpus=units,
            owner_uid=caller.uid,
            owner_name=caller.user,
            pid=caller.pid,
            label=spec.label,
            policy=policy_name,
            created_at=now,
            expires_at=now + terms.ttl_seconds,
            bound=spec.bind_to_process,
            pid_start_time=start_time,
            waited_seconds=0.0 if waited_since is None else max(0.0, now - waited_since),
            power_limit_watts=terms.power_limit_watts,
            on_revoke=spec.on_revoke,
            preemptible=terms.preemptible,
            follow_work=spec.follow_work,
        )

    def terms_of(
        self, caller: Caller, spec: AllocateSpec, waited_since: float | None, now: float
    ) -> GrantTerms:
        """The lifetime, power cap and preemption terms a grant of `spec` to `caller` gets,
        or the error that refuses it (`site/request_bounds.py`, the one place they are
        resolved). `waited_since`: when the request joined the queue."""
        since = spec.queued_since if spec.queued_since is not None else waited_since
        return resolve_terms(
            self._settings.bounds,
            self._quota.applied(caller),
            spec.ask,
            queued_since=now if since is None else since,
        )

    def _end(
        self,
        leases: Sequence[Lease],
        state: LeaseState,
        actor_uid: int,
        detail: str | None = None,
        *,
        at: Mapping[str, float] | None = None,
    ) -> list[Lease]:
        """End `leases` now, or each at its time in `at` (an expiry: when it was due)."""
        now = self._clock()
        ended = [lease.ended(state, at[lease.id] if at else now) for lease in leases]
        also = self._hardware.ending(self._active.values(), leases, now)
        self._ledger.end(ended, actor_uid, detail, also)
        for lease in ended:
            self._active.pop(lease.id, None)
            self._journal.append(Transition(ENDING_EVENT[state], lease, actor_uid, detail))
            self._news.add(lease.id)
            self._deadlines.forget(lease.id)
            self._node.released(lease)
        self._request_ids.retain(self._active)
        return ended

    def _active_lease(self, lease_id: str) -> Lease:
        lease = self._active.get(lease_id)
        if lease is not None and self._deadlines.passed(lease):
            self.expire_due()
            lease = None
        if lease is None:
            ended = self.lease(lease_id)  # UnknownLease when it never existed
            raise LeaseNotActive(
                f"lease {lease_id} is {ended.state.value}", lease=lease_id, state=ended.state.value
            )
        return lease

    def _owned_active(self, caller: Caller, lease_id: str) -> Lease:
        lease = self._active_lease(lease_id)
        if lease.owner_uid != caller.uid and not caller.is_root:
            raise PermissionDenied(
                f"lease {lease_id} belongs to {lease.owner_name}", lease=lease_id
            )
        return lease

    def _ttl(self, caller: Caller, requested: float | None) -> float:
        return granted_ttl(self.ttl_bounds(caller), requested)
