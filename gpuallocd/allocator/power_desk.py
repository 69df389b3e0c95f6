"""The façade's part for power caps (power/caps.py): the cap a request gets, putting back at
start what a stopped daemon left capped, and setting caps again after a driver reload; the
power budget's figures (power/budget.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.allocator.power.caps import resolve_cap
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller

__all__ = ["PowerDesk"]


class PowerDesk:
    """Power caps through the serial worker."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        ledger: Ledger,
        worker: SerialWorker,
        site_default_watts: float | None = None,
    ) -> None:
        self._lifecycle = lifecycle
        self._ledger = ledger
        self._worker = worker
        self.site_default_watts = site_default_watts

    def resolved(self, caller: Caller, spec: AllocateSpec) -> AllocateSpec:
        """The request with the cap it gets (QuotaExceeded above the user's maximum)."""
        applied = self._lifecycle.quota.applied(caller)
        name = "max_power_limit_watts"
        cap = resolve_cap(
            spec.power_limit_watts,
            self.site_default_watts,
            applied.value(name),
            caller.user,
            applied.sources[name],
        )
        return replace(spec, power_limit_watts=cap)

    async def start(self) -> None:
        """Put back what a stopped daemon left capped; set the caps of active leases again."""
        await self._worker.run(self._start)

    def _start(self) -> None:
        active = {lease.id for lease in self._lifecycle.leases()}
        self._lifecycle.hardware.caps.start(self._ledger, active)
        self._lifecycle.hardware.budget.refresh()

    async def reapply(self) -> None:
        """Set again the caps a driver reload took away (and forget those put back)."""
        await self._worker.run(self._reapply)

    def _reapply(self) -> None:
        caps = self._lifecycle.hardware.caps
        caps.reapply()
        caps.forget_done(self._ledger)
        self._lifecycle.hardware.budget.refresh()

    async def status(self) -> dict[str, Any] | None:
        """The power budget's figures for `status` (None without a budget or power readings)."""
        return await self._worker.run(self._status)

    def _status(self) -> dict[str, Any] | None:
        hardware = self._lifecycle.hardware
        if hardware.budget.budget_mw is None and not hardware.budget.readings:
            return None
        return hardware.budget.to_json(self._lifecycle.leases(), hardware.caps.in_force)
