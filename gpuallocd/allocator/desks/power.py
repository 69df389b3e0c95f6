"""The façade's part for power caps (power/caps.py): a grant answered once its cap is set (the cap
a request gets is resolved at its grant: site/request_bounds.py), limits put back a moment after
the end (owed work where the driver refuses or does not answer), the power timer's reading of
every GPU (off the event loop, through the driver guard) that the caps and the power budget
(power/budget.py) work from, and, at start, the caps of active leases set again and what ended
leases left owed."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpuallocd.allocator.crash_points import crash_point
from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.power.caps import Owed, PowerCaps, put_back
from gpuallocd.allocator.power.hardware import LeaseHardware
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.errors import GpuallocError, NvmlError
from gpuallocd.ledger import Ledger
from gpuallocd.model import Lease, PowerReading
from gpuallocd.model.power import PowerCap

__all__ = ["PowerDesk"]

log = logging.getLogger(__name__)


class PowerDesk:
    """Power caps and readings; ledger and in-memory work through the serial worker, driver
    calls through the caps' driver (never on the worker)."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        ledger: Ledger,
        worker: SerialWorker,
        *,
        clock: Callable[[], float] = time.time,
        hardware: LeaseHardware,
    ) -> None:
        """`hardware`: the lease hardware whose caps and power budget it works (its caps'
        `later` is `put_back_later`, set where the façade builds this desk)."""
        self._lifecycle = lifecycle
        self._hardware = hardware
        self._clock = clock
        self._ledger = ledger
        self._worker = worker
        self._putting_back: dict[str, asyncio.Task[None]] = {}

    def adopt_budget(self, budget_watts: float | None, fit: str) -> bool:
        """A reloaded `power_budget_watts` and `power_fit` (SIGHUP), for the next grant;
        whether they changed."""
        return self._hardware.budget.adopt(budget_watts, fit)

    @property
    def readings(self) -> Mapping[str, PowerReading]:
        """Each GPU's last power reading (the power timer's; reading it calls no driver)."""
        return self._hardware.budget.readings

    def gpu_power(self) -> dict[str, dict[str, float | None]]:
        """Each GPU's draw and power limit (its cap where a lease set one) at the last
        reading, by UUID, for the views (no driver call)."""
        return {
            uuid: {
                "draw_watts": None if r.draw_mw is None else r.draw_mw / 1000,
                "limit_watts": None if r.limit_mw is None else r.limit_mw / 1000,
                "default_limit_watts": (
                    None if r.default_limit_mw is None else r.default_limit_mw / 1000
                ),
            }
            for uuid, r in self.readings.items()
        }

    @property
    def caps(self) -> PowerCaps:
        """The caps of the leases (power/caps.py)."""
        return self._hardware.caps

    async def capped(self, lease: Lease) -> None:
        """Once the cap of a lease just granted is set (at once where it needs no setting);
        NvmlError where the driver did not answer within its deadline (the caller withdraws
        the grant, whose end owes the limit back)."""
        if lease.power_limit_watts is not None:
            crash_point("cap-recorded")  # tests only (allocator/crash_points.py)
        await self._hardware.caps.settled(lease.id)

    @staticmethod
    def withdrawn_because(exc: BaseException) -> str | None:
        """What a withdrawn grant's history says: why its cap could not be set, or None (the
        answer could not be delivered)."""
        if isinstance(exc, NvmlError):
            return f"granted, but its power cap could not be set: {exc.message}"
        return None

    async def start(self) -> None:
        """Read what the ledger holds of caps and of limits owed back (records of leases
        that ended while the daemon was down become owed work), read every GPU's power, and
        set the caps of active leases again where their cards lack them."""
        await self._worker.run(self._load)
        await self.reapply()

    def _load(self) -> None:
        active = {lease.id for lease in self._lifecycle.leases()}
        held, unbacked = self._ledger.cap_records()
        left = unbacked + [cap for cap in held if cap.lease_id not in active]
        owed = [put_back(cap.gpu_uuid, cap.restore_mw, cap.lease_id) for cap in left]
        self._ledger.owe_caps(left, owed, self._clock())
        self._lifecycle.reload_caps()  # and each active lease shown its own

    def put_back_later(self, uuid: str, delay: float) -> None:
        """Put back what an ended lease's record owes `uuid` in `delay` seconds: after a
        delay, only if it is still what the end owed (a next lease that kept the cap and
        ended since owes its own, a delay after its end); at once, whatever is owed."""
        owed_then = self._hardware.caps.owed.get(uuid) if delay > 0 else None
        loop = asyncio.get_running_loop()
        loop.call_later(delay, self._put_back_soon, uuid, owed_then)

    def _put_back_soon(self, uuid: str, owed_then: Owed | None) -> None:
        if uuid not in self._putting_back:
            task = asyncio.ensure_future(self._put_back(uuid, owed_then))
            self._putting_back[uuid] = task
            task.add_done_callback(lambda _: self._putting_back.pop(uuid, None))

    async def _put_back(self, uuid: str, owed_then: Owed | None) -> None:
        caps = self._hardware.caps
        failed = await caps.put_back_record(uuid, owed_then)
        if failed is not None:  # owed work from now on (allocator/cleanups.py)
            await self._worker.run(caps.owe, self._ledger, failed, self._clock())

    async def put_back_now(self) -> None:
        """Put back every limit ended leases' records owe, without waiting (a daemon that
        stops); what fails is owed work for the next start."""
        caps = self._hardware.caps
        owed = [uuid for uuid, found in caps.owed.items() if found.record is not None]
        for uuid in owed:
            await self._put_back(uuid, None)
        await asyncio.gather(*self._putting_back.values(), return_exceptions=True)

    async def reapply(self) -> None:
        """The power timer: read every GPU's power, off the event loop; the budget's and the
        caps' figures follow it, and caps a driver reload took away are set again."""
        caps = self._hardware.caps
        driver = caps.driver
        if driver is None:
            return
        asked = caps.asked_now()
        try:
            readings = await driver.read()
        except GpuallocError as exc:
            log.warning("reading the GPUs' power failed (the last reading stands): %s", exc)
            return
        lost = await self._worker.run(self._learned, readings, asked)
        await caps.reapply(lost)

    def _learned(
        self, readings: Mapping[str, PowerReading], asked: Mapping[str, int]
    ) -> list[PowerCap]:
        hardware = self._hardware
        hardware.budget.readings = readings
        hardware.caps.forget_done(self._ledger)  # put back, with no change since to carry it
        return hardware.caps.learned(readings, asked)

    async def status(self) -> dict[str, Any] | None:
        """The power budget's figures for `status` (None without a budget or power readings)."""
        return await self._worker.run(self._status)

    def _status(self) -> dict[str, Any] | None:
        hardware = self._hardware
        if hardware.budget.budget_mw is None and not hardware.budget.readings:
            return None
        return hardware.budget.to_json(self._lifecycle.leases(), hardware.caps.in_force)
