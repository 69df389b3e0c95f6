"""Prometheus metrics of a real daemon: scraped over TCP and read from the textfile, then
parsed with prometheus-client's own parsers."""

from __future__ import annotations

import os
import socket
import stat
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpulease import Client, GpusUnavailable
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from gpuallocd.allocator import GPU_STATES
from gpuallocd.api.tcp_address import parse_host_port
from gpuallocd.errors import ConfigError
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.testing import FakeNvml, nvml_inventory
from tests.harness import HandClock, ProcessDaemon, ThreadDaemon, wait_for
from tests.test_daemon_lifecycle import run_daemon_once

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    """A TCP port nobody listens on right now (the kernel's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def parse(text: str) -> Samples:
    """Every sample by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(address: str, accept: str | None = None) -> tuple[str, str]:
    """GET /metrics: the body and its content type."""
    request = urllib.request.Request(f"http://{address}/metrics")
    if accept:
        request.add_header("Accept", accept)
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read().decode(), response.headers["Content-Type"]


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def metered(start_daemon: Callable[..., ThreadDaemon]) -> Iterator[tuple[ThreadDaemon, str]]:
    """A daemon on the 4-GPU workstation with metrics on a local port, and its address."""
    address = f"127.0.0.1:{free_port()}"
    yield start_daemon(default_policy="simple", metrics_listen=address), address


def test_fresh_daemon_exports_every_gauge_and_counter(metered: tuple[ThreadDaemon, str]) -> None:
    """Before any request: 4 free GPUs, no leases, nobody waiting, every counter at 0."""
    _, address = metered
    body, content_type = scrape(address)
    samples = parse(body)
    assert content_type.startswith("text/plain")
    assert value(samples, "gpuallocd_gpus", state="free") == 4
    for state in ("leased", "in-use", "unhealthy"):
        assert value(samples, "gpuallocd_gpus", state=state) == 0
    assert value(samples, "gpuallocd_queue_waiting") == 0
    for counter in ("grants", "frees", "expiries", "revokes"):
        assert value(samples, f"gpuallocd_{counter}_total") == 0
    assert not any(name == "gpuallocd_leases_active" for name, _ in samples)
    assert not any(name == "gpuallocd_xid_events_total" for name, _ in samples)  # a file inventory


def test_counters_follow_grants_frees_expiries_and_revokes(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """Each transition is counted once; gauges show the leases that remain, by user."""
    clock = HandClock()
    address = f"127.0.0.1:{free_port()}"
    daemon = start_daemon(default_policy="simple", clock=clock, metrics_listen=address)
    with daemon.client() as client:
        freed = client.allocate(1)
        client.free(freed.id)
        client.allocate(1, ttl=30)  # expires below
        revoked = client.allocate(1, ttl=3600)
        kept = client.allocate(1, ttl=3600)
        clock.step(31)
        if os.getuid() == 0:
            client.revoke(revoked.id, reason="maintenance")
        samples = parse(scrape(address)[0])  # the scrape's status read expires the due lease
    root = os.getuid() == 0
    assert value(samples, "gpuallocd_grants_total") == 4
    assert value(samples, "gpuallocd_frees_total") == 1
    assert value(samples, "gpuallocd_expiries_total") == 1
    assert value(samples, "gpuallocd_revokes_total") == (1 if root else 0)
    assert value(samples, "gpuallocd_gpus", state="leased") == (1 if root else 2)
    assert value(samples, "gpuallocd_leases_active", user=kept.user) == (1 if root else 2)
    assert value(samples, "gpuallocd_allocate_seconds_count", wait="false", outcome="granted") == 4
    assert value(samples, "gpuallocd_ledger_commit_seconds_count") >= 6


def test_refused_allocation_is_timed_as_refused(metered: tuple[ThreadDaemon, str]) -> None:
    """An allocation that cannot be served lands in the `refused` series of the histogram."""
    daemon, address = metered
    with daemon.client() as client:
        client.allocate(3)
        with pytest.raises(GpusUnavailable):
            client.allocate(2)
    samples = parse(scrape(address)[0])
    assert value(samples, "gpuallocd_allocate_seconds_count", wait="false", outcome="refused") == 1
    assert value(samples, "gpuallocd_grants_total") == 1


def test_queue_gauge_counts_waiters(metered: tuple[ThreadDaemon, str]) -> None:
    """A request waiting for GPUs shows in `gpuallocd_queue_waiting` until it is granted."""
    daemon, address = metered
    granted: list[str] = []
    with daemon.client() as client:
        holder = client.allocate(4)

        def wait_for_gpus() -> None:
            with daemon.client(timeout=60) as waiting:
                granted.append(waiting.allocate(4, wait=True, timeout=60).id)

        thread = threading.Thread(target=wait_for_gpus)
        thread.start()
        wait_for(lambda: value(parse(scrape(address)[0]), "gpuallocd_queue_waiting") == 1, 20)
        client.free(holder.id)
        thread.join(30)
    samples = parse(scrape(address)[0])
    assert len(granted) == 1
    assert value(samples, "gpuallocd_queue_waiting") == 0
    assert value(samples, "gpuallocd_grants_total") == 2
    assert value(samples, "gpuallocd_allocate_seconds_count", wait="true", outcome="granted") == 1


def test_openmetrics_is_served_when_asked_for(metered: tuple[ThreadDaemon, str]) -> None:
    """A scraper that accepts OpenMetrics gets it, and it parses as OpenMetrics."""
    _, address = metered
    body, content_type = scrape(address, accept="application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    names = {family.name for family in openmetrics_families(body)}
    assert {"gpuallocd_grants", "gpuallocd_gpus", "gpuallocd_allocate_seconds"} <= names


@pytest.fixture
def dgx_metered(
    start_daemon: Callable[..., ThreadDaemon],
) -> Iterator[tuple[ThreadDaemon, FakeNvml, str]]:
    """The recorded DGX A100 through the real NVML backend, metrics on a local port."""
    inventory, fake = nvml_inventory("dgx-a100-mig", xid_wait_ms=20)

    def open_recorded(spec: str) -> NvmlInventory:
        return inventory

    address = f"127.0.0.1:{free_port()}"
    daemon = start_daemon(
        inventory="nvml-recording:dgx-a100-mig",
        inventory_opener=open_recorded,
        sample_interval_seconds=0.05,
        metrics_listen=address,
    )
    yield daemon, fake, address
    inventory.close()


def test_xid_events_are_counted_per_gpu(dgx_metered: tuple[ThreadDaemon, FakeNvml, str]) -> None:
    """Every Xid the driver reports counts on its GPU, critical or not; the others stay 0."""
    _, fake, address = dgx_metered
    hit, other = fake.uuids()[3], fake.uuids()[0]
    fake.inject_xid(hit, 13)  # an application fault: counted, GPU still healthy
    fake.inject_xid(hit, 79)  # fallen off the bus: counted, GPU unhealthy

    def xids() -> Samples:
        return parse(scrape(address)[0])

    wait_for(lambda: value(xids(), "gpuallocd_xid_events_total", gpu=hit, index="3") == 2, 20)
    wait_for(lambda: value(xids(), "gpuallocd_gpus", state="unhealthy") == 1, 20)
    samples = xids()
    assert value(samples, "gpuallocd_xid_events_total", gpu=other, index="0") == 0
    assert sum(value(samples, "gpuallocd_gpus", state=s) for s in GPU_STATES) == len(fake.uuids())


def test_live_memory_and_utilization_per_gpu(
    dgx_metered: tuple[ThreadDaemon, FakeNvml, str],
) -> None:
    """Memory in use (bytes) and utilization (a ratio, 0 to 1) come from the live sample."""
    _, fake, address = dgx_metered
    uuid = fake.uuids()[1]
    fake.set_memory_used(uuid, 5 * 2**30)
    fake.set_utilization(uuid, 75)

    def sample_of(name: str) -> float:
        return value(parse(scrape(address)[0]), name, gpu=uuid, index="1")

    wait_for(lambda: sample_of("gpuallocd_gpu_memory_used_bytes") == 5 * 2**30, 20)
    wait_for(lambda: sample_of("gpuallocd_gpu_utilization_ratio") == 0.75, 20)
    assert sample_of("gpuallocd_gpu_memory_total_bytes") > 5 * 2**30


def test_textfile_is_written_for_node_exporter(
    start_daemon: Callable[..., ThreadDaemon], short_dir: Path
) -> None:
    """The textfile follows the leases on each sample interval, world-readable, no temp left."""
    path = short_dir / "metrics" / "gpuallocd.prom"
    path.parent.mkdir()
    daemon = start_daemon(
        default_policy="simple", metrics_textfile=str(path), sample_interval_seconds=0.05
    )

    def grants_and_leased() -> tuple[float, float]:
        text = path.read_text() if path.exists() else ""
        if not text:
            return -1, -1
        samples = parse(text)
        return value(samples, "gpuallocd_grants_total"), value(
            samples, "gpuallocd_gpus", state="leased"
        )

    wait_for(lambda: grants_and_leased() == (0, 0), 20)
    with daemon.client() as client:
        client.allocate(2)
    # A sample taken in the same turn as the grant may count it before it shows the GPUs;
    # the next sample shows both.
    wait_for(lambda: grants_and_leased() == (1, 2), 20)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["gpuallocd.prom"]


def test_metrics_over_a_daemon_process(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """`python -m gpuallocd --metrics-listen` serves the same endpoint as the daemon runs."""
    address = f"127.0.0.1:{free_port()}"
    daemon = process_daemon(metrics_listen=address)
    with Client(daemon.paths.socket) as client:
        client.allocate(1)
    assert value(parse(scrape(address)[0]), "gpuallocd_grants_total") == 1
    assert daemon.stop() == 0


def test_metrics_port_in_use_leaves_the_api_served(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """A metrics address that cannot be bound does not stop the start: the API is served,
    and health names the port and why."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        daemon = process_daemon(metrics_listen=address)
        with Client(daemon.paths.socket) as client:
            (port,) = client.health()["ports"]
            assert len(client.allocate(1).gpus) == 1
    assert port["port"] == "metrics" and not port["serving"]
    assert port["error"].startswith(f"cannot serve metrics on {address}")
    assert f"cannot serve metrics on {address}" in daemon.stderr()
    assert daemon.stop() == 0


def test_bad_metrics_address_is_a_config_error(short_dir: Path) -> None:
    """`metrics_listen` without a port stops the daemon with exit code 78."""
    result = run_daemon_once(
        short_dir, "--inventory", "example:dgx1-volta", "--metrics-listen", "x"
    )
    assert result.returncode == 78
    assert "metrics_listen must be HOST:PORT" in result.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9423", ("127.0.0.1", 9423)),
        ("[::1]:9423", ("::1", 9423)),
        ("localhost:1", ("localhost", 1)),
        (" 0.0.0.0:65535 ", ("0.0.0.0", 65535)),
    ],
)
def test_listen_address_forms(text: str, expected: tuple[str, int]) -> None:
    """HOST:PORT, an IPv6 host in brackets."""
    assert parse_host_port(text, "metrics_listen", allow_wildcard=True) == expected


@pytest.mark.parametrize("text", ["9423", ":9423", "::1:9423", "host:", "host:0", "host:70000"])
def test_listen_address_mistakes(text: str) -> None:
    """A missing host or port, a bare IPv6 address, or a port out of range is refused."""
    with pytest.raises(ConfigError):
        parse_host_port(text, "metrics_listen", allow_wildcard=True)
