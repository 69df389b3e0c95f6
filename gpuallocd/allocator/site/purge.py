"""Purging ended leases and unleased-use records past the history's retention, in batches,
and the users' running totals older than both the retention and the longest budget's window
(a budget counts back 30 days however short the retention)."""

from __future__ import annotations

import asyncio

from gpuallocd.allocator.site.budgets import LONGEST_WINDOW
from gpuallocd.allocator.worker import SerialWorker
from gpuallocd.ledger import Ledger

__all__ = ["PURGE_BATCH", "PURGE_PAUSE", "TOTALS_KEPT_SECONDS", "purge_before"]

PURGE_BATCH = 200  # leases per purge transaction: a few milliseconds of the writer's time
PURGE_PAUSE = 0.01
TOTALS_KEPT_SECONDS = LONGEST_WINDOW + 86400.0  # the longest budget's window, and a day


async def purge_before(
    worker: SerialWorker,
    ledger: Ledger,
    cutoff: float,
    now: float,
    batch: int = PURGE_BATCH,
    pause: float = PURGE_PAUSE,
) -> int:
    """Delete what ended before `cutoff`, `batch` rows a transaction with `pause` seconds
    between batches, so a long purge never stalls requests; how many leases and records.
    Running totals go only where older than `now` less `TOTALS_KEPT_SECONDS` as well."""
    totals_cutoff = min(cutoff, now - TOTALS_KEPT_SECONDS)
    purged = 0
    while True:
        done = await worker.run(ledger.purge_before, cutoff, batch)
        done += await worker.run(ledger.purge_unleased_before, cutoff, batch)
        done += await worker.run(ledger.purge_energy_before, cutoff, batch)
        done += await worker.run(ledger.purge_totals_before, totals_cutoff, batch)
        purged += done
        if done < batch:
            return purged
        await asyncio.sleep(pause)  # requests run between batches
