"""The façade's part for energy: the energy timer's reading of every leased GPU and of GPUs
used without a lease (docs/accounting.md), from the counters the last live sample read (no
driver call here). Grants and ends read their own GPUs in the lifecycle; what they read is
written here, within RECORD_WITHIN_SECONDS, all of it in one transaction."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.long_reads import LongReads
from gpuallocd.allocator.power.hardware import RECORD_WITHIN_SECONDS, LeaseHardware
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.ledger import Ledger

__all__ = ["EnergyDesk"]


class EnergyDesk:
    """Energy readings through the serial worker, recorded in the ledger."""

    def __init__(
        self,
        lifecycle: LeaseLifecycle,
        ledger: Ledger,
        worker: SerialWorker,
        clock: Callable[[], float],
        reads: LongReads,
        *,
        hardware: LeaseHardware,
    ) -> None:
        """`hardware`: the lease hardware whose energy meter and unwritten readings it
        writes (power/hardware.py)."""
        self._reads = reads
        self._hardware = hardware
        self._totals: dict[str, float] = {}  # joules per user, all readings up to _seen
        self._seen = 0
        self._lifecycle = lifecycle
        self._ledger = ledger
        self._worker = worker
        self._clock = clock
        self._recording: asyncio.Task[None] | None = None

    @property
    def metered(self) -> bool:
        """Whether the inventory has energy counters to read (NVML does)."""
        return self._hardware.energy.enabled

    async def meter(self) -> None:
        """Read every GPU a lease holds or someone used: what each lease, and each user
        without a lease there, drew since the last reading (so a restart or a driver reload
        loses at most one interval)."""
        await self._worker.run(self._meter)

    def _meter(self) -> None:
        hardware = self._hardware
        uses = hardware.energy.uses_of_all(self._lifecycle.leases(), self._clock())
        self._ledger.record_energy(hardware.take_unrecorded() + uses)

    def record_soon(self) -> None:
        """Grants or ends read energy: write it within RECORD_WITHIN_SECONDS (the lease
        hardware's `record_soon`, set where the façade builds this desk)."""
        if self._recording is None or self._recording.done():
            self._recording = asyncio.ensure_future(self._record_later())

    async def _record_later(self) -> None:
        await asyncio.sleep(RECORD_WITHIN_SECONDS)
        await self.record()

    async def record(self) -> None:
        """Write the energy grants and ends read, now (one transaction)."""
        hardware = self._hardware
        if hardware.unrecorded:
            await self._worker.run(lambda: self._ledger.record_energy(hardware.take_unrecorded()))

    async def totals(self) -> dict[str, float]:
        """Joules per user since the daemon started counting (the metrics' counter): the
        readings recorded since the last call are added, off the event loop."""
        more, self._seen = await self._reads.energy_after(self._seen)
        for user, joules in more.items():
            self._totals[user] = self._totals.get(user, 0.0) + joules
        return dict(self._totals)
