"""SIGHUP reloads the limits without dropping leases or waiters."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from gpulease import Lease, QuotaExceeded

from tests.harness import DaemonPaths, ProcessDaemon, wait_for


def max_gpus(daemon: ProcessDaemon) -> float | None:
    with daemon.client() as client:
        entries = {e["limit"]: e["value"] for e in client.limits()["limits"]}
    return entries["max_gpus"]


def wait_for_one(daemon: ProcessDaemon) -> Lease:
    with daemon.client() as client:
        return client.allocate(1, wait=True, timeout=60)


@pytest.fixture
def daemon(paths: DaemonPaths) -> Iterator[ProcessDaemon]:
    """`python -m gpuallocd` with `[limits] max_gpus = 8` in its config file."""
    daemon = ProcessDaemon(paths, default_policy="simple")
    with open(daemon.config_file, "a") as config:
        config.write("[limits]\nmax_gpus = 8\n")
    daemon.start()
    yield daemon
    if daemon.process is not None and daemon.process.poll() is None:
        daemon.kill()


def test_sighup_reloads_the_limits_and_keeps_leases_and_waiters(daemon: ProcessDaemon) -> None:
    """max_gpus goes from 8 to 2 on SIGHUP: a lease of 4 and a waiter stay; a new request
    meets the new limit. A config that no longer reads keeps the rules in force."""
    with daemon.client() as client, ThreadPoolExecutor(1) as pool:
        held = client.allocate(4)
        waiting = pool.submit(wait_for_one, daemon)
        wait_for(lambda: len(client.queue()) == 1, 30)
        daemon.config_file.write_text(daemon.config_file.read_text().replace("= 8", "= 2"))
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: max_gpus(daemon) == 2, 30)
        assert client.lease(held.id).state == "active"
        assert len(client.queue()) == 1
        with pytest.raises(QuotaExceeded) as refused:
            client.allocate(1)
        assert refused.value.details == {"limit": "max_gpus", "value": 2, "current": 4}
        daemon.config_file.write_text(daemon.config_file.read_text() + "max_gpu = 1\n")
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: "reload refused" in daemon.stderr(), 30)
        assert max_gpus(daemon) == 2
        client.free(held.id)
        assert waiting.result(60).state == "active"
    assert daemon.stop() == 0
