"""The node as metrics show it: GPU states, active leases, the queue, live GPU readings.

These are read at the moment of a scrape (or of a textfile write), through the allocator's
façade like any other reader, and turned into metric families by `node_families`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpuallocd.allocator import GPU_STATES, AllocatorFacade, GpuStatus
from gpuallocd.inventory import Inventory, XidCounting
from gpuallocd.model import Lease, LeaseEvent
from gpuallocd.model.lease import ENDINGS

__all__ = ["NodeSample", "node_families", "take_sample"]

GPU_LABELS = ["gpu", "index"]


@dataclass(frozen=True)
class NodeSample:
    """What the node looked like at one moment."""

    gpus: tuple[GpuStatus, ...]
    leases: tuple[Lease, ...]
    waiting: int
    xid_counts: Mapping[str, int] | None  # None: the backend does not count Xid events
    unleased_actions: Mapping[str, int] = field(default_factory=dict)  # by action
    unleased_now: int = 0  # processes using GPUs without a lease at the last sample
    energy_joules: Mapping[str, float] | None = None  # per user; None: no energy counters
    preemptions: Mapping[tuple[str, str], int] = field(default_factory=dict)  # trigger, outcome
    preempting: int = 0  # preemptions under way


async def take_sample(facade: AllocatorFacade, inventory: Inventory) -> NodeSample:
    """Read the node through the façade (on the event loop, like a `status` request)."""
    gpus = await facade.gpus.gpu_status()
    leases = await facade.leases()
    xids = inventory.xid_counts() if isinstance(inventory, XidCounting) else None
    waiters = await facade.waiters()
    unleased = facade.unleased
    actions, now = dict(unleased.counts), len(unleased.offenders())
    energy = await facade.energy.totals() if facade.energy.metered else None
    preemption = facade.preemption
    return NodeSample(
        tuple(gpus),
        tuple(leases),
        len(waiters),
        xids,
        actions,
        now,
        energy,
        dict(preemption.counts),
        len(preemption.book),
    )


def _gpu_labels(status: GpuStatus) -> list[str]:
    return [status.gpu.uuid, str(status.gpu.index)]


def _gpus_by_state(sample: NodeSample) -> Metric:
    family = GaugeMetricFamily("gpuallocd_gpus", "GPUs of the node by state.", labels=["state"])
    counts = Counter(status.state for status in sample.gpus)
    for state in GPU_STATES:
        family.add_metric([state], counts[state])
    return family


def _leases_by_user(sample: NodeSample) -> Metric:
    family = GaugeMetricFamily(
        "gpuallocd_leases_active", "Active leases by owner.", labels=["user"]
    )
    for user, count in sorted(Counter(lease.owner_name for lease in sample.leases).items()):
        family.add_metric([user], count)
    return family


def _live_families(sample: NodeSample) -> Iterator[Metric]:
    used = GaugeMetricFamily(
        "gpuallocd_gpu_memory_used_bytes", "GPU memory in use.", labels=GPU_LABELS
    )
    total = GaugeMetricFamily(
        "gpuallocd_gpu_memory_total_bytes", "GPU memory in all.", labels=GPU_LABELS
    )
    utilization = GaugeMetricFamily(
        "gpuallocd_gpu_utilization_ratio",
        "Fraction of the last sample period a kernel ran on the GPU (0 to 1).",
        labels=GPU_LABELS,
    )
    for status in sample.gpus:
        labels = _gpu_labels(status)
        if status.gpu.memory_total_bytes is not None:
            total.add_metric(labels, status.gpu.memory_total_bytes)
        if status.live.memory_used_bytes is not None:
            used.add_metric(labels, status.live.memory_used_bytes)
        if status.live.utilization_percent is not None:
            utilization.add_metric(labels, status.live.utilization_percent / 100.0)
    yield from (used, total, utilization)


def _xid_family(sample: NodeSample, counts: Mapping[str, int]) -> Metric:
    family = CounterMetricFamily(
        "gpuallocd_xid_events",
        "Xid events reported by the driver per GPU since the daemon started (any Xid).",
        labels=GPU_LABELS,
    )
    for status in sample.gpus:
        family.add_metric(_gpu_labels(status), counts.get(status.gpu.uuid, 0))
    return family


UNLEASED_ACTIONS = ("reported", "terminated", "killed", "adopted")


def _unleased_families(sample: NodeSample) -> Iterator[Metric]:
    actions = CounterMetricFamily(
        "gpuallocd_unleased_actions",
        "Actions on processes using a GPU without a lease (docs/enforcement.md).",
        labels=["action"],
    )
    for action in UNLEASED_ACTIONS:
        actions.add_metric([action], sample.unleased_actions.get(action, 0))
    yield actions
    yield GaugeMetricFamily(
        "gpuallocd_unleased_processes",
        "Processes using a GPU without a lease at the last sample.",
        value=sample.unleased_now,
    )


PREEMPT_TRIGGERS = ("request", "reservation", "admin")
# how a preemption ended: at a checkpoint, at its deadline, or by another end of its lease first
PREEMPT_OUTCOMES = (
    "acknowledged",
    "killed",
    *sorted(ENDINGS - {LeaseEvent.PREEMPTED.value}),
)


def _preemption_families(sample: NodeSample) -> Iterator[Metric]:
    """Preemptions since start by trigger and outcome, those under way, and the preemptible
    GPUs held now (docs/preemption.md)."""
    ended = CounterMetricFamily(
        "gpuallocd_preemptions",
        "Preemptions since the daemon started, by what asked for them and how they ended "
        "(acknowledged: at a checkpoint; killed: at the deadline; freed, expired, revoked: "
        "the lease ended otherwise first).",
        labels=["trigger", "outcome"],
    )
    for trigger in PREEMPT_TRIGGERS:
        for outcome in PREEMPT_OUTCOMES:
            ended.add_metric([trigger, outcome], sample.preemptions.get((trigger, outcome), 0))
    yield ended
    yield GaugeMetricFamily(
        "gpuallocd_preemptions_open", "Preemptions under way.", value=sample.preempting
    )
    held = GaugeMetricFamily(
        "gpuallocd_preemptible_gpus", "GPUs held in preemptible leases, by owner.", labels=["user"]
    )
    by_user: Counter[str] = Counter()
    for lease in sample.leases:
        if lease.preemptible is not None:
            by_user[lease.owner_name] += len({unit.gpu_uuid for unit in lease.gpus})
    for user, gpus in sorted(by_user.items()):
        held.add_metric([user], gpus)
    yield held


def node_families(sample: NodeSample) -> Iterator[Metric]:
    """The metric families of one sample."""
    yield _gpus_by_state(sample)
    yield _leases_by_user(sample)
    yield GaugeMetricFamily(
        "gpuallocd_queue_waiting", "Requests waiting for GPUs.", value=sample.waiting
    )
    yield from _live_families(sample)
    if sample.xid_counts is not None:
        yield _xid_family(sample, sample.xid_counts)
    yield from _unleased_families(sample)
    yield from _preemption_families(sample)
    if sample.energy_joules is not None:
        yield _energy_family(sample.energy_joules)


def _energy_family(joules: Mapping[str, float]) -> Metric:
    family = CounterMetricFamily(
        "gpuallocd_energy_joules",
        "Energy drawn by each user's leases and unleased use (docs/accounting.md).",
        labels=["user"],
    )
    for user, value in sorted(joules.items()):
        family.add_metric([user], value)
    return family
