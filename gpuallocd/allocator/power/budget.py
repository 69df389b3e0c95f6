"""The box's power budget (`power_budget_watts`): power as an allocatable resource.

Committed watts: each GPU under a lease counts its lease's cap (or its card's default limit),
each free GPU what it drew at the last reading (the power timer's, off the event loop): its
idle draw, or the draw of processes run on it without a lease. A grant that would commit
more than the budget waits (`power_fit = "wait"`), or is granted with a lower cap where
every card of it accepts one (`power_fit = "cap"`); one that could not fit even on an idle
box is refused at once, naming the cap that would fit (never_fits.py). The queue and the
refusal say what the committed watts are made of, naming who draws without a lease: `1,084
of 1,100 W committed: 700 W by leases, 384 W drawn without a lease by bob on GPU 2`. Caps bound
sustained draw, not millisecond spikes (docs/accounting.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpuallocd.allocator.power.never_fits import Request, check_ever_fits
from gpuallocd.errors import GpusUnavailable
from gpuallocd.host.users import user_name
from gpuallocd.model import Lease, PowerReading, UnitKind
from gpuallocd.model.power import PowerCap
from gpuallocd.text import escape_unprintable

__all__ = [
    "FITS",
    "Drawers",
    "OverBudget",
    "PowerBudget",
    "PowerTerms",
    "below_defaults",
    "unleased_words",
]

FITS = ("wait", "cap")
NAMED = 3  # users named in a refusal; the others counted

Drawers = Mapping[str, tuple[int, Mapping[int, float]]]  # GPU -> (index, {uid: share})
PowerTerms = tuple[float | None, str]  # `power_budget_watts` (None: no budget), `power_fit`


def _milliwatts(watts: float | None) -> int | None:
    return None if watts is None else round(watts * 1000)


def _gpus(indices: list[int]) -> str:
    listed = ", ".join(str(i) for i in sorted(indices))
    return f"GPU {listed}" if len(indices) == 1 else f"GPUs {listed}"


def unleased_words(
    drawn: Mapping[int, tuple[float, list[int]]], name_of: Callable[[int], str] = user_name
) -> str:
    """`384 W drawn without a lease by bob on GPU 2` from {uid: (mW, GPU indices)}; several
    users each with their watts, the most first, beyond NAMED counted. Names are escaped
    (a user name is text its owner may have had a say in)."""
    total = sum(mw for mw, _ in drawn.values())
    ranked = sorted(drawn.items(), key=lambda item: (-item[1][0], item[0]))
    named = [
        (escape_unprintable(name_of(uid)), mw, _gpus(indices))
        for uid, (mw, indices) in ranked[:NAMED]
    ]
    if len(named) == 1:
        name, _, gpus = named[0]
        return f"{total / 1000:,.0f} W drawn without a lease by {name} on {gpus}"
    each = ", ".join(f"{mw / 1000:,.0f} W by {name} on {gpus}" for name, mw, gpus in named)
    more = len(ranked) - len(named)
    rest = f", and {more} more user(s)" if more else ""
    return f"{total / 1000:,.0f} W drawn without a lease: {each}{rest}"


def below_defaults(budget_watts: float | None, readings: Mapping[str, PowerReading]) -> str | None:
    """The warning where the budget is below what the cards' default limits commit (every
    GPU leased, none capped): leases then wait for power, or are refused, on an idle box."""
    defaults = [r.default_limit_mw or r.limit_mw or 0 for r in readings.values()]
    total, n = sum(defaults), len(defaults)
    if budget_watts is None or not total or budget_watts * 1000 >= total:
        return None
    per_gpu = math.floor(budget_watts / n)
    lows = [r.min_limit_mw for r in readings.values()]
    lowest = max(low for low in lows if low is not None) if None not in lows else None
    if lowest is not None and per_gpu * 1000 >= lowest:
        all_of = f"all {n} fit at --power-limit {per_gpu}W"
    elif lowest is not None:
        all_of = f"not all {n} fit even at the cards' lowest limit, {lowest / 1000:,.0f} W"
    else:
        all_of = "the cards say no range of caps"
    return (
        f"power_budget_watts = {budget_watts:,.0f} W is below the {total / 1000:,.0f} W the "
        f"{n} GPUs' default power limits commit: a request for many GPUs waits for power or "
        f"is refused even on an idle box unless capped ({all_of}); raise the budget to what "
        'the power supply carries, or set lease_power_limit_watts or power_fit = "cap" '
        "(docs/accounting.md)"
    )


class OverBudget(Exception):
    """A preview's lease over the budget: the refusal its grant would get, and the note the
    queue would show its waiter (never on the wire: the refusal is)."""

    def __init__(self, note: str, refusal: GpusUnavailable) -> None:
        super().__init__(refusal.message)
        self.note = note
        self.refusal = refusal


@dataclass(frozen=True, slots=True)
class _Over:
    """A lease that does not fit the budget: what is committed, and what it would add."""

    committed_mw: int
    base_mw: int
    request: Request


class PowerBudget:
    """Committed and drawn watts of the node, and whether a grant fits its budget."""

    def __init__(self, budget_watts: float | None, fit: str) -> None:
        self.budget_mw = _milliwatts(budget_watts)
        self.fit = fit
        self._readings: Mapping[str, PowerReading] = {}
        self.idle_mw: dict[str, int] = {}  # GPU -> its idle draw: the lowest read of it
        self.note: str | None = None  # why the last request did not fit (for the queue)
        self.short_mw = 0  # by how much it did not fit (the queue's estimate)

    @property
    def readings(self) -> Mapping[str, PowerReading]:
        """Each GPU's last power reading (the power timer's, off the event loop)."""
        return self._readings

    @readings.setter
    def readings(self, readings: Mapping[str, PowerReading]) -> None:
        self._readings = readings
        for uuid, reading in readings.items():
            if reading.draw_mw is not None:
                self.idle_mw[uuid] = min(reading.draw_mw, self.idle_mw.get(uuid, reading.draw_mw))

    def adopt(self, budget_watts: float | None, fit: str) -> bool:
        """The budget and the fit as a reloaded config says (SIGHUP): the next grant and the
        queue's next look use them; leases granted under the old ones keep their caps.
        Whether they changed."""
        budget_mw = _milliwatts(budget_watts)
        if (budget_mw, fit) == (self.budget_mw, self.fit):
            return False
        self.budget_mw, self.fit = budget_mw, fit
        return True

    def _committed_of(self, uuid: str, leased: bool, caps: Mapping[str, PowerCap]) -> int:
        reading = self.readings.get(uuid)
        if uuid in caps:
            return caps[uuid].set_mw
        if reading is None:
            return 0
        if leased:
            return reading.default_limit_mw or reading.limit_mw or 0
        return reading.draw_mw or 0

    def committed_mw(self, active: Collection[Lease], caps: Mapping[str, PowerCap]) -> int:
        return self._committed({unit.gpu_uuid for lease in active for unit in lease.gpus}, caps)

    def _committed(self, leased: Collection[str], caps: Mapping[str, PowerCap]) -> int:
        """`_committed_of` summed over every GPU read (one loop: it runs at every grant)."""
        total = 0
        for uuid, reading in self.readings.items():
            cap = caps.get(uuid)
            if cap is not None:
                total += cap.set_mw
            elif uuid in leased:
                total += reading.default_limit_mw or reading.limit_mw or 0
            else:
                total += reading.draw_mw or 0
        return total

    def frees_mw(self, uuids: Collection[str], caps: Mapping[str, PowerCap]) -> int:
        """What the end of the leases on `uuids` frees: each GPU's cap or default limit, less
        its idle draw."""
        return sum(
            self._committed_of(uuid, True, caps) - self.idle_mw.get(uuid, 0) for uuid in uuids
        )

    def drawn_mw(self) -> int:
        return sum(r.draw_mw or 0 for r in self.readings.values())

    def to_json(self, active: Collection[Lease], caps: Mapping[str, PowerCap]) -> dict[str, Any]:
        """What `status` shows: the budget, committed and drawn watts."""
        return {
            "budget_watts": None if self.budget_mw is None else self.budget_mw / 1000,
            "committed_watts": self.committed_mw(active, caps) / 1000,
            "drawn_watts": self.drawn_mw() / 1000,
            "fit": self.fit,
        }

    def committed_words(
        self, active: Collection[Lease], caps: Mapping[str, PowerCap], drawers: Drawers
    ) -> str:
        """What the committed watts are made of: `700 W by leases, 384 W drawn without a
        lease by bob on GPU 2, 172 W idle`; `drawers`: who used each GPU at the last sample."""
        leased = {unit.gpu_uuid for lease in active for unit in lease.gpus}
        by_leases = idle = 0
        unleased: dict[int, tuple[float, list[int]]] = {}
        for uuid in self.readings:
            committed = self._committed_of(uuid, uuid in leased, caps)
            index, shares = drawers.get(uuid, (-1, {}))
            if uuid in leased:
                by_leases += committed
                continue
            if not shares:
                idle += committed
            for uid, share in shares.items():
                mw, indices = unleased.get(uid, (0.0, []))
                unleased[uid] = (mw + committed * share, [*indices, index])
        words = [f"{by_leases / 1000:,.0f} W by leases"] if by_leases else []
        words += [unleased_words(unleased)] if unleased else []
        words += [f"{idle / 1000:,.0f} W idle"] if idle else []
        return ", ".join(words)

    def fitted(
        self,
        active: Collection[Lease],
        lease: Lease,
        caps: Mapping[str, PowerCap],
        drawers: Callable[[], Drawers] | None = None,
    ) -> Lease:
        """The lease if it fits the budget, or with a lower cap (`cap`); else GpusUnavailable,
        which keeps a waiting request in the queue. `drawers` says who used each GPU at the last
        sample, asked only to name them in the reason. Why it did not fit is kept for the
        queue (`note`)."""
        found = self._fitting(active, lease, caps)
        if isinstance(found, Lease):
            self.note = None
            return found
        self.note, refusal = self._refusal(found, active, caps, drawers)
        self.short_mw = found.base_mw + sum(found.request.wanted_mw) - (self.budget_mw or 0)
        raise refusal

    def check(
        self,
        active: Collection[Lease],
        lease: Lease,
        caps: Mapping[str, PowerCap],
        drawers: Callable[[], Drawers] | None = None,
    ) -> Lease:
        """As `fitted`, remembering nothing (the preview's): OverBudget where it does not fit."""
        found = self._fitting(active, lease, caps)
        if isinstance(found, Lease):
            return found
        raise OverBudget(*self._refusal(found, active, caps, drawers))

    def check_at_arrival(
        self,
        count: int,
        asked_watts: float | None,
        required: Collection[str],
        gpus: Collection[str],
    ) -> None:
        """OverPowerBudget where no `count` whole GPUs of `gpus` (`required` among them)
        could ever fit the budget, even on an idle box: refused when the request arrives,
        not after it waited for GPUs to come free. The `count` cheapest to power are
        weighed (what each adds over its idle draw), so no request a choice could fit is
        refused here; the grant weighs the GPUs it chose (`fitted`). Under `power_fit =
        "cap"` only a request that no cap could fit on any choice is weighed at all."""
        if self.budget_mw is None or count <= 0 or not self.readings:
            return
        if self.fit == "cap" and self._some_cap_may_fit(max(count, len(required)), gpus):
            return
        others = sorted(
            (uuid for uuid in gpus if uuid not in required),
            key=lambda uuid: (self._wanted(uuid, asked_watts) - self.idle_mw.get(uuid, 0), uuid),
        )
        chosen = [*required, *others][: max(count, len(required))]
        wanted = [self._wanted(uuid, asked_watts) for uuid in chosen]
        request = Request(chosen, wanted, asked_watts, cappable=True, per_gpu_now_mw=-1)
        check_ever_fits(request, self.readings, self.idle_mw, self.budget_mw, self.fit)

    def _some_cap_may_fit(self, count: int, gpus: Collection[str]) -> bool:
        """Whether `count` of `gpus` might fit the budget on an idle box at some cap: a bound
        below every choice's commitment (each at the lowest limit any card takes, the largest
        idle draws set aside) is within it, or a card cannot say (unread, or no lowest limit)."""
        read = self.readings
        lows = [read[uuid].min_limit_mw if uuid in read else None for uuid in gpus]
        known = [low for low in lows if low is not None]
        if len(known) < len(lows) or not known:
            return True
        idle = sorted((self.idle_mw.get(uuid, 0) for uuid in gpus), reverse=True)
        assert self.budget_mw is not None
        return sum(idle[count:]) + count * min(known) <= self.budget_mw

    def _fitting(
        self, active: Collection[Lease], lease: Lease, caps: Mapping[str, PowerCap]
    ) -> Lease | _Over:
        if self.budget_mw is None:
            return lease
        leased = {unit.gpu_uuid for held in active for unit in held.gpus}
        new = sorted({u.gpu_uuid for u in lease.gpus} - leased)
        if not new:
            return lease
        committed = self._committed(leased, caps)
        base = committed - sum(self._committed_of(uuid, False, caps) for uuid in new)
        wanted = [self._wanted(uuid, lease.power_limit_watts) for uuid in new]
        if base + sum(wanted) <= self.budget_mw:
            return lease
        per_gpu = (self.budget_mw - base) // len(new)
        whole = all(unit.kind is UnitKind.WHOLE for unit in lease.gpus)  # caps set whole GPUs
        if self.fit == "cap" and whole and self._capable(new, per_gpu):
            return replace(lease, power_limit_watts=math.floor(per_gpu / 1000))
        return _Over(committed, base, Request(new, wanted, lease.power_limit_watts, whole, per_gpu))

    def _refusal(
        self,
        over: _Over,
        active: Collection[Lease],
        caps: Mapping[str, PowerCap],
        drawers: Callable[[], Drawers] | None,
    ) -> tuple[str, GpusUnavailable]:
        """Why the lease does not fit (the queue's note), and the refusal that says so; the
        refusal of a request that could not fit even on an idle box (`never_fits.py`) first."""
        budget_mw = self.budget_mw or 0
        check_ever_fits(over.request, self.readings, self.idle_mw, budget_mw, self.fit)
        made_of = self.committed_words(active, caps, {} if drawers is None else drawers())
        note = f"{over.committed_mw / 1000:,.0f} of {budget_mw / 1000:,.0f} W committed" + (
            f": {made_of}" if made_of else ""
        )
        wanted, count = sum(over.request.wanted_mw), len(over.request.gpus)
        refusal = GpusUnavailable(
            f"power: {note}; {count} more GPU(s) would commit {wanted / 1000:,.0f} W",
            count=count,
        )
        return note, refusal

    def _wanted(self, uuid: str, cap_watts: float | None) -> int:
        reading = self.readings.get(uuid)
        full = 0 if reading is None else reading.default_limit_mw or reading.limit_mw or 0
        if cap_watts is None:
            return full
        low = 0 if reading is None else reading.min_limit_mw or 0
        return max(low, min(full, round(cap_watts * 1000)))

    def _capable(self, uuids: Collection[str], per_gpu_mw: int) -> bool:
        """Whether every card takes a cap of `per_gpu_mw` (at or above its lowest limit)."""
        for uuid in uuids:
            reading = self.readings.get(uuid)
            if reading is None or reading.min_limit_mw is None:
                return False
            if per_gpu_mw < reading.min_limit_mw:
                return False
        return True
