"""One exposition of every metric: the daemon's counters plus a sample of the node."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.exposition import choose_encoder, generate_latest
from prometheus_client.metrics_core import Metric

from gpuallocd.metrics.instruments import DaemonMetrics
from gpuallocd.metrics.node import NodeSample, node_families

__all__ = ["Exposition", "render_negotiated", "render_text"]


class Exposition:
    """A prometheus-client collector over the daemon's metrics and one node sample.

    Built per scrape, so concurrent scrapes never share a sample.
    """

    def __init__(self, metrics: DaemonMetrics, sample: NodeSample) -> None:
        self._metrics = metrics
        self._sample = sample

    def collect(self) -> Iterable[Metric]:
        yield from self._metrics.collect()
        yield from node_families(self._sample)


def render_text(metrics: DaemonMetrics, sample: NodeSample) -> bytes:
    """The Prometheus text format (what node_exporter's textfile collector reads)."""
    return generate_latest(Exposition(metrics, sample))


def render_negotiated(metrics: DaemonMetrics, sample: NodeSample, accept: str) -> tuple[bytes, str]:
    """The format the scraper asked for (OpenMetrics or text) and its content type."""
    encoder, content_type = choose_encoder(accept)
    return encoder(Exposition(metrics, sample)), content_type
