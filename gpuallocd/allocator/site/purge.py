"""Purging ended leases and unleased-use records past the history's retention, in batches."""

from __future__ import annotations

import asyncio

from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.ledger import Ledger

__all__ = ["PURGE_BATCH", "PURGE_PAUSE", "purge_before"]

PURGE_BATCH = 200  # leases per purge transaction: a few milliseconds of the writer's time
PURGE_PAUSE = 0.01


async def purge_before(
    worker: SerialWorker,
    ledger: Ledger,
    cutoff: float,
    batch: int = PURGE_BATCH,
    pause: float = PURGE_PAUSE,
) -> int:
    """Delete what ended before `cutoff`, `batch` rows a transaction with `pause` seconds
    between batches, so a long purge never stalls requests; how many leases and records."""
    purged = 0
    while True:
        done = await worker.run(ledger.purge_before, cutoff, batch)
        done += await worker.run(ledger.purge_unleased_before, cutoff, batch)
        done += await worker.run(ledger.purge_energy_before, cutoff, batch)
        purged += done
        if done < batch:
            return purged
        await asyncio.sleep(pause)  # requests run between batches
