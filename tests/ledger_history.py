"""Histories written straight into a real ledger: leases granted and ended at given times, as
the lifecycle records them, for the tests of what is read back (totals, usage, charts)."""

from __future__ import annotations

import itertools
from pathlib import Path

from gpuallocd.inventory import open_inventory
from gpuallocd.ledger import Ledger
from gpuallocd.model import Gpu, Lease, LeasedGpu, LeaseState

INVENTORY = "example:synthetic-32gpu"
_ids = itertools.count()


def open_ledger(path: Path) -> tuple[Ledger, tuple[Gpu, ...]]:
    """A new ledger at `path` that knows the 32 GPUs of the synthetic node."""
    gpus = tuple(open_inventory(INVENTORY).topology().gpus)
    ledger = Ledger(path, sync="normal")
    ledger.sync_gpus(gpus, 0.0)
    return ledger, gpus


def a_lease(
    gpus: tuple[Gpu, ...],
    uid: int,
    start: float,
    *,
    count: int = 1,
    first: int = 0,
    waited: float = 0.0,
) -> Lease:
    """A lease of `uid` (named u<uid>) on `count` GPUs from index `first`, granted at `start`."""
    units = tuple(LeasedGpu(g.uuid, g.index) for g in gpus[first : first + count])
    return Lease(
        id=f"h{next(_ids):08x}",
        gpus=units,
        owner_uid=uid,
        owner_name=f"u{uid}",
        pid=None,
        label=None,
        policy="simple",
        created_at=start,
        expires_at=start + 10 * 86400.0,
        waited_seconds=waited,
    )


def held(
    ledger: Ledger,
    gpus: tuple[Gpu, ...],
    uid: int,
    start: float,
    end: float | None,
    **options: float,
) -> Lease:
    """Grant a lease at `start` and, unless `end` is None, free it at `end`."""
    lease = a_lease(gpus, uid, start, **options)  # type: ignore[arg-type]
    ledger.grant(lease, uid)
    if end is not None:
        ledger.end([lease.ended(LeaseState.FREED, end)], uid)
    return lease
