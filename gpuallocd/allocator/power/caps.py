"""Power caps of leases: each leased GPU's power limit set for the lease, put back at its end.

A lease's cap in watts is resolved at its grant with its other bounds
(`allocator/site/request_bounds.py`); here it is kept within each card's constraints. At the
grant, in its transaction, the ledger records per GPU the cap and the limit to put back
(`power_caps`); once the grant is committed the cap is set. At the end the previous limit is
put back once the end is committed, and the record is deleted in the next transaction; a
daemon killed in between finds the record at its start and puts the limit back then. A driver
reload puts every card's default back: the timer sets the caps again. Whole GPUs only: a
share's or a MIG instance's GPU is others' too, and is never capped.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gpuallocd.errors import GpuallocError
from gpuallocd.ledger import Ledger
from gpuallocd.model import Lease, PowerReading, UnitKind
from gpuallocd.model.power import PowerCap as Cap

__all__ = ["CardCap", "PowerCaps", "PowerControl", "card_caps"]

log = logging.getLogger(__name__)


class PowerControl(Protocol):
    """What caps need of the inventory (NVML's `power` and `set_power_limit`)."""

    def power(self, uuids: Collection[str] | None = None) -> Mapping[str, PowerReading]: ...

    def set_power_limit(self, uuid: str, limit_mw: int) -> None: ...


@dataclass(frozen=True, slots=True)
class CardCap:
    """A whole GPU's cap for a lease: in mW within its card's range, whether the range moved
    it from what the lease asked, and the limit it replaces."""

    uuid: str
    limit_mw: int
    clamped: bool
    previous_mw: int


def card_caps(lease: Lease, readings: Mapping[str, PowerReading]) -> list[CardCap]:
    """The cap each whole GPU of `lease` gets from its card's `readings`: none without a cap,
    nor on a card that reports no range."""
    if lease.power_limit_watts is None:
        return []
    asked = round(lease.power_limit_watts * 1000)
    caps = []
    for unit in lease.gpus:
        reading = readings.get(unit.uuid) if unit.kind is UnitKind.WHOLE else None
        if reading is None or reading.limit_mw is None:
            continue
        low, high = reading.min_limit_mw, reading.max_limit_mw
        if low is not None and high is not None:
            limit = max(low, min(high, asked))
            caps.append(CardCap(unit.uuid, limit, limit != asked, reading.limit_mw))
    return caps


class PowerCaps:
    """The caps in force, and the setting and putting back that follow each commit."""

    def __init__(self, control: PowerControl | None) -> None:
        self._control = control
        self.in_force: dict[str, Cap] = {}  # GPU -> its cap
        self._to_set: dict[str, list[Cap]] = {}  # lease -> caps recorded, to set once committed
        self._done: list[Cap] = []  # put back: their records go in the next transaction

    def granted(self, ledger: Ledger, lease: Lease) -> None:
        """Record the caps of a lease being granted (in its transaction)."""
        self._forget_done(ledger)
        if self._control is None or lease.power_limit_watts is None:
            return
        whole = [u.uuid for u in lease.gpus if u.kind is UnitKind.WHOLE]
        readings = self._control.power(whole) if whole else {}
        caps = [
            Cap(c.uuid, lease.id, c.limit_mw, c.previous_mw) for c in card_caps(lease, readings)
        ]
        if caps:
            ledger.record_caps(caps)
            self._to_set[lease.id] = caps

    def planned(self, lease: Lease, readings: Mapping[str, PowerReading]) -> list[CardCap]:
        """The caps a grant of `lease` would set, from readings already taken (the preview's:
        no driver call); none where nothing sets caps here."""
        return [] if self._control is None else card_caps(lease, readings)

    def ending(self, ledger: Ledger, leases: Iterable[Lease]) -> None:
        """Leases are ending (in their transaction): their caps are put back once committed."""
        self._forget_done(ledger)

    def lease_granted(self, lease: Lease) -> None:
        """The grant is committed: set its caps."""
        for cap in self._to_set.pop(lease.id, []):
            if self._set(cap.gpu_uuid, cap.set_mw, f"cap lease {lease.id}"):
                self.in_force[cap.gpu_uuid] = cap

    def lease_ended(self, lease: Lease) -> None:
        """The end is committed: put back the limits its caps replaced."""
        for unit in lease.gpus:
            cap = self.in_force.get(unit.uuid)
            if cap is not None and cap.lease_id == lease.id:
                self._put_back(cap)

    def commit_published(self) -> None:
        self._to_set.clear()  # caps of a grant whose commit failed are never set

    def start(self, ledger: Ledger, active: Collection[str]) -> None:
        """At the daemon's start: put back the limits of leases that ended while it was down
        (or that it could not put back before it stopped), set again those of active ones."""
        found = ledger.power_caps()
        for cap in found:  # put back first: an active lease's cap is set after, over it
            if cap.lease_id not in active:
                self._put_back(cap)
        for cap in found:
            if cap.lease_id in active:
                self.in_force[cap.gpu_uuid] = cap
        self.reapply()
        self._forget_done(ledger)

    def reapply(self) -> None:
        """Set again the caps a driver reload (or anyone) took away."""
        if self._control is None or not self.in_force:
            return
        readings = self._control.power(list(self.in_force))
        for uuid, cap in list(self.in_force.items()):
            reading = readings.get(uuid)
            if reading is not None and reading.limit_mw != cap.set_mw:
                log.warning("GPU %s lost the cap of lease %s: set again", uuid, cap.lease_id)
                self._set(uuid, cap.set_mw, f"cap lease {cap.lease_id} again")

    def forget_done(self, ledger: Ledger) -> None:
        self._forget_done(ledger)

    def _put_back(self, cap: Cap) -> None:
        self._set(cap.gpu_uuid, cap.restore_mw, f"put back the limit after lease {cap.lease_id}")
        if self.in_force.get(cap.gpu_uuid) == cap:
            del self.in_force[cap.gpu_uuid]
        self._done.append(cap)

    def _forget_done(self, ledger: Ledger) -> None:
        if self._done:
            ledger.forget_caps(self._done)
            self._done = []

    def _set(self, uuid: str, limit_mw: int, what: str) -> bool:
        if self._control is None:
            return False
        try:
            self._control.set_power_limit(uuid, limit_mw)
        except GpuallocError as exc:
            log.error("could not %s on GPU %s (%d mW): %s", what, uuid, limit_mw, exc.message)
            return False
        log.info("%s: GPU %s at %d W", what, uuid, limit_mw // 1000)
        return True
