"""The daemon's own counters and histograms, fed as things happen.

`DaemonMetrics` is the allocator's `LeaseObserver` (grants, frees, expiries, revokes, ends
by preemption, how
long allocate took) and the ledger's commit timer. It holds its own registry, never
prometheus-client's global one, so two daemons in one process keep apart.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import Metric

from gpuallocd.model import Lease, LeaseState

__all__ = ["ALLOCATE_BUCKETS", "COMMIT_BUCKETS", "DaemonMetrics"]

# An allocate without waiting takes well under 10 ms plus one fsync; waiting ones take longer.
ALLOCATE_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 300.0,
)  # fmt: skip
# A COMMIT is one fsync of the WAL with ledger_sync = "full", none with "normal".
COMMIT_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
)  # fmt: skip


class DaemonMetrics:
    """Counters of lease transitions and histograms of allocate and commit durations."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.grants = self._counter("grants", "Leases granted (immediately or after waiting).")
        self.frees = self._counter("frees", "Leases freed by their owner, root, or process exit.")
        self.expiries = self._counter("expiries", "Leases ended because their TTL ran out.")
        self.revokes = self._counter("revokes", "Leases revoked by root.")
        self.preempted = self._counter(
            "preempted", "Leases ended by a preemption: at a checkpoint or at the deadline."
        )
        self.allocate_seconds = Histogram(
            "gpuallocd_allocate_seconds",
            "Time an allocate request spent in the allocator, waiting in the queue included "
            "(wait=true); outcome is granted, refused or cancelled.",
            ["wait", "outcome"],
            buckets=ALLOCATE_BUCKETS,
            registry=self.registry,
        )
        self.ledger_commit_seconds = Histogram(
            "gpuallocd_ledger_commit_seconds",
            "Time of each ledger COMMIT (the fsync of the write-ahead log).",
            buckets=COMMIT_BUCKETS,
            registry=self.registry,
        )
        self._ended = {
            LeaseState.FREED: self.frees,
            LeaseState.EXPIRED: self.expiries,
            LeaseState.REVOKED: self.revokes,
            LeaseState.PREEMPTED: self.preempted,
        }

    def _counter(self, name: str, documentation: str) -> Counter:
        return Counter(f"gpuallocd_{name}", documentation, registry=self.registry)

    # LeaseObserver ----------------------------------------------------------------------------

    def lease_granted(self, lease: Lease) -> None:
        self.grants.inc()

    def lease_ended(self, lease: Lease) -> None:
        counter = self._ended.get(lease.state)
        if counter is not None:
            counter.inc()

    def commit_published(self) -> None:
        return None

    def allocation_finished(self, seconds: float, *, waited: bool, outcome: str) -> None:
        wait = "true" if waited else "false"
        self.allocate_seconds.labels(wait=wait, outcome=outcome).observe(seconds)

    # Ledger -----------------------------------------------------------------------------------

    def observe_commit(self, seconds: float) -> None:
        self.ledger_commit_seconds.observe(seconds)

    def collect(self) -> Iterable[Metric]:
        """Every counter and histogram, as prometheus-client collects them."""
        return self.registry.collect()
