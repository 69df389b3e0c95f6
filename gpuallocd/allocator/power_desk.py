"""The façade's part for power caps (power/caps.py): putting back at start what a stopped
daemon left capped, and setting caps again after a driver reload; the power budget's figures
(power/budget.py). The cap a request gets is resolved at its grant (site/request_bounds.py)."""

from __future__ import annotations

from typing import Any

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.ledger import Ledger

__all__ = ["PowerDesk"]


class PowerDesk:
    """Power caps through the serial worker."""

    def __init__(self, lifecycle: LeaseLifecycle, ledger: Ledger, worker: SerialWorker) -> None:
        self._lifecycle = lifecycle
        self._ledger = ledger
        self._worker = worker

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
