"""Prometheus metrics: counters fed by the allocator and ledger, the node read at scrape time.

    instruments.py  DaemonMetrics: lease transitions, allocate and commit histograms
    node.py         NodeSample: GPU states, leases, queue, live GPU readings, Xid counts
    render.py       one exposition of both (Prometheus text or OpenMetrics)
    exporter.py     MetricsExporter: `/metrics` on a TCP address, the textfile loop
    textfile.py     atomic writes for node_exporter's textfile collector

Every metric is listed in docs/metrics.md.
"""

from __future__ import annotations

from gpuallocd.metrics.exporter import MetricsExporter
from gpuallocd.metrics.instruments import DaemonMetrics
from gpuallocd.metrics.node import NodeSample, take_sample

__all__ = ["DaemonMetrics", "MetricsExporter", "NodeSample", "take_sample"]
