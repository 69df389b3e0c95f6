"""Power caps of leases: each leased GPU's power limit set for the lease, put back after.

A lease's cap in watts is resolved at its grant with its other bounds
(`allocator/site/request_bounds.py`); here it is kept within each card's constraints. Whole GPUs
only: a share's or a MIG instance's GPU is others' too, and is never capped. Every driver call
goes through the driver guard, off the event loop (`PowerDriver`); nothing here waits on the
driver inside a transaction:

- **Grant.** In its transaction, the ledger records per GPU the cap (on the lease's unit) and
  the limit to put back (`power_caps`, where the GPU owes none yet), both from what the
  daemon knows (the card's range from the last power
  reading; the limit it last set or read), so the grant reads nothing from the driver. Once
  committed the cap is set, and the grant is answered after: a card that has the cap already
  (the GPU's last lease had the same) is not set again. While a driver call hangs, a grant
  whose cap would need setting is refused at once; a set that passes the driver's deadline
  withdraws the grant (`PowerDesk.capped`). A set the driver refuses (no permission) is
  logged and the lease runs uncapped.
- **End.** The record stays: it is what is owed back. The limit is put back
  PUT_BACK_DELAY_SECONDS later (`PowerDesk`), and the record deleted with the next change.
  A grant of the GPU meanwhile that sets a cap of its own keeps the record as it is (the
  limit to put back is the same: its transaction writes only its units' caps; no driver call
  where the cap is the same); one without a cap has the limit put back at once.
- **A put-back that fails or passes the deadline** becomes owed work in `pending_cleanups`
  (kind `power_limit`; the record goes in the same transaction), done by the owed-work runner
  (allocator/cleanups.py) as often as it takes, across restarts, shown by `doctor`. At
  start, the records of leases that ended while the daemon was down become owed work too.
- **Driver reload** (every card back at its default): the power timer's reading finds the
  caps gone and sets them again (`learned`).

What the daemon knows of each card (`_card`: the limit it has; `_base`: the limit to put back
when no lease caps it) is learnt from its own sets and from the timer's readings; a reading
taken before a set of the same GPU was asked for is not learnt from (`_asked`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from gpuallocd.errors import GpuallocError, NvmlError
from gpuallocd.ledger import Ledger
from gpuallocd.ledger.cleanup_records import due_now_steps, supersede_steps
from gpuallocd.ledger.hot import Step
from gpuallocd.ledger.power_records import cap_steps, forget_cap_steps
from gpuallocd.model import Lease, PowerReading, UnitKind
from gpuallocd.model.cleanup import Cleanup
from gpuallocd.model.power import PowerCap as Cap

__all__ = ["POWER_LIMIT", "CardCap", "Owed", "PowerCaps", "PowerDriver", "card_caps", "put_back"]

log = logging.getLogger(__name__)

POWER_LIMIT = "power_limit"  # the owed work that puts a GPU's limit back
PUT_BACK_DELAY_SECONDS = 1.0  # a GPU's next lease within this keeps a cap it shares


class PowerDriver(Protocol):
    """The driver's power calls, off the event loop, one at a time with the other driver
    calls, each within the driver's deadline (the daemon's driver guard). Each raises
    NvmlError where the driver refuses or does not answer in time."""

    @property
    def hung(self) -> bool:
        """A driver call runs past its deadline now."""
        ...

    async def read(self) -> Mapping[str, PowerReading]:
        """Every whole GPU's power (a GPU that cannot be read is left out)."""
        ...

    async def set_limit(self, uuid: str, limit_mw: int, task: str) -> None: ...


def _within(reading: PowerReading, watts: float) -> int | None:
    """The cap in mW kept within the card's constraints; None where the card has none."""
    low, high = reading.min_limit_mw, reading.max_limit_mw
    if low is None or high is None:
        return None
    return max(low, min(high, round(watts * 1000)))


def _no_runner(due: float) -> None:
    return None


def _no_timer(uuid: str, delay: float) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Owed:
    """A limit owed back to a GPU: by an ended lease's cap record (`record`), or by a row of
    `pending_cleanups` (None: the owed-work runner does it)."""

    restore_mw: int
    record: Cap | None = None


def put_back(uuid: str, restore_mw: int, lease_id: str | None) -> Cleanup:
    """The owed work of putting `uuid`'s limit back to `restore_mw`."""
    return Cleanup(POWER_LIMIT, uuid, {"restore_mw": restore_mw}, lease_id)


@dataclass(slots=True)
class _Before:
    """What a grant's `granted` may change, as it was before (`refused` puts it back)."""

    lease_id: str
    owed: dict[str, Owed]  # of the lease's GPUs
    done: list[Cap]
    due_now: set[str]
    back_now: set[str]


@dataclass(frozen=True, slots=True)
class CardCap:
    """A whole GPU's cap for a lease: in mW within its card's range, whether the range moved
    it from what the lease asked, and the limit it replaces."""

    uuid: str
    limit_mw: int
    clamped: bool
    previous_mw: int


def card_caps(lease: Lease, readings: Mapping[str, PowerReading]) -> list[CardCap]:
    """The cap each whole GPU of `lease` gets from its card's `readings` (a preview's: no
    driver call): none without a cap, nor on a card that reports no range."""
    if lease.power_limit_watts is None:
        return []
    asked = round(lease.power_limit_watts * 1000)
    caps = []
    for unit in lease.gpus:
        reading = readings.get(unit.uuid) if unit.kind is UnitKind.WHOLE else None
        if reading is None or reading.limit_mw is None:
            continue
        limit = _within(reading, lease.power_limit_watts)
        if limit is not None:
            caps.append(CardCap(unit.uuid, limit, limit != asked, reading.limit_mw))
    return caps


class PowerCaps:
    """The caps recorded and in force, the limits owed back, and what the daemon knows of
    each card's limit."""

    def __init__(self, driver: PowerDriver | None) -> None:
        self._driver = driver
        self.readings: dict[str, PowerReading] = {}  # the last power reading of each GPU
        self.recorded: dict[str, list[Cap]] = {}  # active lease -> its caps, as recorded
        self.in_force: dict[str, Cap] = {}  # GPU -> the cap set on it
        self.owed: dict[str, Owed] = {}  # GPU -> the limit owed back to it
        self._done: list[Cap] = []  # records of limits put back: deleted with the next change
        self._card: dict[str, int] = {}  # GPU -> the limit it has, as last set or read
        self._base: dict[str, int] = {}  # GPU -> its limit when no lease caps it
        self._asked: dict[str, int] = {}  # GPU -> sets asked so far (readings older: ignored)
        self._in_flight: dict[str, int] = {}  # GPU -> its sets not answered yet
        self._to_set: dict[str, list[Cap]] = {}  # lease -> caps to set once committed
        self._setting: dict[str, asyncio.Future[None]] = {}  # lease -> its caps being set
        self._due_now: set[str] = set()  # GPUs whose owed row a grant made due now
        self._back_now: set[str] = set()  # GPUs whose record a grant wants put back now
        self._before: _Before | None = None  # what the last grant changed, were it refused
        self.wake: Callable[[float], None] = _no_runner  # the owed-work runner's (cleanups.py)
        self.later: Callable[[str, float], None] = _no_timer  # a put-back in N s (PowerDesk)

    @property
    def driver(self) -> PowerDriver | None:
        """The driver's power calls (None: no power control here)."""
        return self._driver

    # In the transaction of a change ---------------------------------------------------------

    def granted(self, lease: Lease, at: float) -> list[Step]:
        """The rows a grant's caps add to its transaction; NvmlError (nothing recorded) where
        a cap would need the driver while it hangs, or no power reading came yet."""
        whole = [u.uuid for u in lease.gpus if u.kind is UnitKind.WHOLE]
        if self._driver is None or not whole:
            return []
        self._before = _Before(
            lease.id,
            {uuid: self.owed[uuid] for uuid in whole if uuid in self.owed},
            list(self._done),
            set(self._due_now),
            set(self._back_now),
        )
        caps: list[Cap] = []
        if lease.power_limit_watts is not None:
            caps = self._caps(lease.id, whole, lease.power_limit_watts)
            to_set = [cap for cap in caps if self._card.get(cap.gpu_uuid) != cap.set_mw]
            if to_set and self._driver.hung:
                raise NvmlError(
                    "a GPU driver call hangs (`gpuallocctl doctor` names it): a power cap "
                    "cannot be set until the driver answers; ask without --power-limit, or wait",
                    nvml_call="nvmlDeviceSetPowerManagementLimit",
                )
            self.recorded[lease.id] = caps
            if to_set:
                self._to_set[lease.id] = to_set
        steps = [step for cap in caps for step in self._take_over(cap)]
        capped = {cap.gpu_uuid for cap in caps}
        for uuid in whole:  # no cap here: what is owed back to the GPU is done now
            owed = self.owed.get(uuid)
            if uuid in capped or owed is None:
                continue
            if owed.record is None:
                self._due_now.add(uuid)
                steps += due_now_steps(POWER_LIMIT, [uuid], at)
            else:
                self._back_now.add(uuid)
        return self._forget_done() + steps  # a record put back goes before one made anew

    def refused(self, lease_id: str) -> None:
        """The ledger refused the grant of `lease_id` (nothing of it was written): what its
        `granted` changed here is as it was before."""
        before, self._before = self._before, None
        if before is None or before.lease_id != lease_id:
            return
        self.recorded.pop(lease_id, None)
        self._to_set.pop(lease_id, None)
        self.owed.update(before.owed)
        self._done = before.done + self._done
        self._due_now, self._back_now = before.due_now, before.back_now

    def unit_caps(self, lease_id: str) -> dict[str, int]:
        """The cap in mW of each GPU of a lease being granted, for its units' rows."""
        return {cap.gpu_uuid: cap.set_mw for cap in self.recorded.get(lease_id, ())}

    def planned(self, lease: Lease, readings: Mapping[str, PowerReading]) -> list[CardCap]:
        """The caps a grant of `lease` would set, from readings already taken (the preview's:
        no driver call); none where nothing sets caps here."""
        return [] if self._driver is None else card_caps(lease, readings)

    def as_set(self, lease: Lease) -> Lease:
        """The lease with the cap its cards took (the highest where they differ), and the
        cap asked for where that was another (kept within the cards' range)."""
        caps = self.recorded.get(lease.id)
        if not caps or lease.power_limit_watts is None:
            return lease
        watts = _highest_watts(caps)
        if watts == lease.power_limit_watts:
            return lease
        return replace(
            lease, power_limit_watts=watts, power_limit_requested_watts=lease.power_limit_watts
        )

    def as_recorded(self, lease: Lease) -> Lease:
        """A lease read back from the ledger (a restart, a failed commit) with the cap its
        units' rows say its cards took (the highest where they differ): the lease row keeps
        no cap."""
        caps = self.recorded.get(lease.id)
        if not caps or lease.power_limit_watts is not None:
            return lease
        return replace(lease, power_limit_watts=_highest_watts(caps))

    def _caps(self, lease_id: str, whole: Sequence[str], watts: float) -> list[Cap]:
        if not self.readings:
            raise NvmlError(
                "the GPUs' power limits have not been read yet (the driver has not answered "
                "since the daemon started): a power cap cannot be set; try again shortly",
                nvml_call="nvmlDeviceGetPowerManagementLimitConstraints",
            )
        caps = []
        for uuid in whole:
            reading = self.readings.get(uuid)
            limit = None if reading is None else _within(reading, watts)
            owed = self.owed.get(uuid)
            restore = self._base.get(uuid) if owed is None else owed.restore_mw
            if limit is not None and restore is not None:
                caps.append(Cap(uuid, lease_id, limit, restore))
        return caps

    def _take_over(self, cap: Cap) -> list[Step]:
        """The record of what `cap` owes back: the GPU's owed limit, if any, is now owed at
        the end of `cap`'s lease (an ended lease's record stays as it is)."""
        owed = self.owed.pop(cap.gpu_uuid, None)
        if owed is None:
            return cap_steps([cap])
        if owed.record is not None:
            return []
        return cap_steps([cap]) + supersede_steps(POWER_LIMIT, [cap.gpu_uuid])

    def ending(self, leases: Iterable[Lease]) -> list[Step]:
        """The end of `leases`: their records stay, as the limits owed back (nothing more to
        write than the records of limits put back since the last change)."""
        for lease in leases:
            for cap in self.recorded.pop(lease.id, ()):
                self.owed[cap.gpu_uuid] = Owed(cap.restore_mw, cap)
                if self.in_force.get(cap.gpu_uuid) == cap:
                    del self.in_force[cap.gpu_uuid]
        return self._forget_done()

    def _forget_done(self) -> list[Step]:
        done, self._done = self._done, []
        return forget_cap_steps(done)

    def reload(self, ledger: Ledger, active: Collection[str]) -> None:
        """Read the caps and the limits owed back again from the ledger (after a failed
        commit, or at start); limits owed by records are put back at once."""
        self.recorded, self.owed, self._done = {}, {}, []
        held, unbacked = ledger.cap_records()
        for cap in held:
            if cap.lease_id in active:
                self.recorded.setdefault(cap.lease_id, []).append(cap)
            else:
                unbacked.append(cap)
        for cap in unbacked:
            self.owed[cap.gpu_uuid] = Owed(cap.restore_mw, cap)
            self.later(cap.gpu_uuid, 0.0)
        for pending in ledger.pending_cleanups():
            if pending.cleanup.kind == POWER_LIMIT:
                restore = int(pending.cleanup.payload["restore_mw"])
                self.owed[pending.cleanup.target] = Owed(restore)
        capped = {cap for caps in self.recorded.values() for cap in caps}
        self.in_force = {uuid: cap for uuid, cap in self.in_force.items() if cap in capped}
        self._to_set.clear()
        self._due_now.clear()
        self._back_now.clear()

    # After the commit (allocator/observer.py) ------------------------------------------------

    def lease_granted(self, lease: Lease) -> None:
        """The grant is committed: set its caps (`settled` is their outcome); what it wants
        put back now is done at once."""
        caps = self._to_set.pop(lease.id, None)
        if caps:
            self._setting[lease.id] = asyncio.ensure_future(self._set_caps(caps))
        if self._due_now:
            self._due_now.clear()
            self.wake(0.0)
        for uuid in self._back_now:
            self.later(uuid, 0.0)
        self._back_now.clear()

    def lease_ended(self, lease: Lease) -> None:
        """The end is committed: its limits are put back a moment later."""
        self._setting.pop(lease.id, None)
        for unit in lease.gpus:
            owed = self.owed.get(unit.uuid)
            if owed is not None and owed.record is not None and owed.record.lease_id == lease.id:
                self.later(unit.uuid, PUT_BACK_DELAY_SECONDS)

    def commit_published(self) -> None:
        self._to_set.clear()  # caps of a grant whose commit failed are never set

    async def settled(self, lease_id: str) -> None:
        """Once the caps of a lease just granted are set: NvmlError where the driver did not
        answer in time (a refusal by the driver is logged, and the lease runs uncapped)."""
        setting = self._setting.pop(lease_id, None)
        if setting is not None:
            await setting

    async def _set_caps(self, caps: Sequence[Cap]) -> None:
        for cap in caps:
            try:
                await self._set(cap.gpu_uuid, cap.set_mw, f"cap lease {cap.lease_id}")
            except NvmlError:
                if self._driver is not None and self._driver.hung:
                    raise  # the grant is withdrawn; its end owes the limit back
                continue  # logged: the lease runs uncapped on this GPU
            if cap in self.recorded.get(cap.lease_id, ()):
                self.in_force[cap.gpu_uuid] = cap

    # Off the transactions --------------------------------------------------------------------

    async def put_back_record(self, uuid: str, owed_then: Owed | None = None) -> Cap | None:
        """Put back the limit an ended lease's record owes `uuid` (none: nothing to do); the
        record, where the driver refused or did not answer, to owe in `pending_cleanups`.
        `owed_then`: what was owed when the put-back was planned (at an end); a later end's
        owed limit is not this put-back's to do (its own, a delay after it, is)."""
        owed = self.owed.get(uuid)
        if owed is None or owed.record is None:
            return None  # taken over by a grant, done, or the owed-work runner's
        if owed_then is not None and owed is not owed_then:
            return None  # a next lease kept the cap, and has ended since
        what = f"put back the limit after lease {owed.record.lease_id}"
        try:
            await self._set(uuid, owed.restore_mw, what)
        except NvmlError:
            return owed.record if self.owed.get(uuid) is owed else None
        if self.owed.get(uuid) is owed:
            del self.owed[uuid]
            self._base[uuid] = owed.restore_mw
            self._done.append(owed.record)
        return None

    def owe(self, ledger: Ledger, record: Cap, now: float) -> None:
        """A put-back that failed becomes owed work: its record goes, a `pending_cleanups`
        row takes its place (one transaction), and the runner is woken."""
        owed = self.owed.get(record.gpu_uuid)
        if owed is None or owed.record != record:
            return  # a grant took it over meanwhile
        owed_work = put_back(record.gpu_uuid, record.restore_mw, record.lease_id)
        ledger.owe_caps([record], [owed_work], now)
        self.owed[record.gpu_uuid] = Owed(record.restore_mw)
        self.wake(now)

    def forget_done(self, ledger: Ledger) -> None:
        """Delete the records of limits put back, with no change to carry them (the power
        timer's)."""
        done, self._done = self._done, []
        if done:
            ledger.forget_caps(done)

    async def put_back(self, cleanup: Cleanup) -> None:
        """Do an owed put-back (the runner's `power_limit` handler); NvmlError keeps it owed.
        One a grant's cap took over since is done with nothing to do."""
        uuid, restore = cleanup.target, int(cleanup.payload["restore_mw"])
        owed = self.owed.get(uuid)
        if owed is None or owed.record is not None or owed.restore_mw != restore:
            return
        await self._set(uuid, restore, f"put back the limit after lease {cleanup.lease_id}")
        if self.owed.get(uuid) is owed:
            del self.owed[uuid]
            self._base[uuid] = restore

    def learned(self, readings: Mapping[str, PowerReading], asked: Mapping[str, int]) -> list[Cap]:
        """Take a power reading of every GPU, asked for when `asked` sets had been (its
        `asked_now()`): what each card has, and its limit when no lease caps it. The caps
        recorded that a card does not have (a driver reload took them, or the daemon
        restarted), to set again; a cap the driver refused at its grant is not tried again."""
        self.readings = dict(readings)
        capped = {cap.gpu_uuid: cap for caps in self.recorded.values() for cap in caps}
        lost = []
        for uuid, reading in readings.items():
            if reading.limit_mw is None or asked.get(uuid, 0) != self._asked.get(uuid, 0):
                continue  # a set was asked for since the reading: it says nothing now
            self._card[uuid] = reading.limit_mw
            cap = capped.get(uuid)
            if cap is None:
                if uuid not in self.owed:
                    self._base[uuid] = reading.limit_mw
            elif reading.limit_mw == cap.set_mw:
                self.in_force[uuid] = cap
            elif uuid in self.in_force or uuid not in self._asked:
                log.warning("GPU %s lacks the cap of lease %s: set again", uuid, cap.lease_id)
                lost.append(cap)
        return lost

    def asked_now(self) -> dict[str, int]:
        """How many sets each GPU was asked for so far (taken when a reading is asked for)."""
        return dict(self._asked)

    async def reapply(self, caps: Collection[Cap]) -> None:
        """Set again the caps a driver reload (or anyone) took away."""
        for cap in caps:
            try:
                await self._set(cap.gpu_uuid, cap.set_mw, f"cap lease {cap.lease_id} again")
            except GpuallocError:
                continue  # logged; the next reading tries again

    async def _set(self, uuid: str, limit_mw: int, what: str) -> None:
        if self._driver is None:
            return
        self._asked[uuid] = self._asked.get(uuid, 0) + 1
        self._in_flight[uuid] = self._in_flight.get(uuid, 0) + 1
        self._card.pop(uuid, None)  # unknown until the driver says it took it
        try:
            await self._driver.set_limit(uuid, limit_mw, what)
        except NvmlError as exc:
            log.error("could not %s on GPU %s (%d mW): %s", what, uuid, limit_mw, exc.message)
            raise
        else:
            if self._in_flight[uuid] == 1:  # no later set of it is waiting its turn
                self._card[uuid] = limit_mw
            log.info("%s: GPU %s at %d W", what, uuid, limit_mw // 1000)
        finally:
            self._in_flight[uuid] -= 1


def _highest_watts(caps: Sequence[Cap]) -> float:
    """The highest cap of a lease's cards, in watts (a whole number where it is one)."""
    most = max(cap.set_mw for cap in caps)
    return most // 1000 if most % 1000 == 0 else most / 1000
