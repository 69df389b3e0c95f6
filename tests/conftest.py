"""Fixtures: short temporary paths, environment hygiene, and real daemons."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonPaths, ProcessDaemon, ThreadDaemon
from tests.service_unit import shipped_unit

pytest_plugins = [
    "tests.system_users",  # the `system_users` fixture: real users (as root)
    "tests.local_users",
    "tests.leftovers",  # the run fails on a process it left behind
]


@pytest.fixture(autouse=True)
def restore_environ() -> Iterator[None]:
    """Tests may change os.environ; every test starts from the same environment."""
    saved = dict(os.environ)
    os.environ.pop("GPUALLOCD_SOCKET", None)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A temporary directory with a short path: Unix socket paths are limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ga-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def paths(short_dir: Path) -> DaemonPaths:
    return DaemonPaths(short_dir)


@pytest.fixture
def start_daemon(paths: DaemonPaths) -> Iterator[Callable[..., ThreadDaemon]]:
    """Start an in-process daemon (in a thread) with the given settings."""
    started: list[ThreadDaemon] = []

    def start(**settings: Any) -> ThreadDaemon:
        daemon = ThreadDaemon(paths, **settings).start()
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop()


@pytest.fixture
def daemon(start_daemon: Callable[..., ThreadDaemon]) -> ThreadDaemon:
    """A daemon on the bundled 4-GPU workstation topology with the `simple` policy."""
    return start_daemon(default_policy="simple")


@pytest.fixture
def process_daemon(paths: DaemonPaths) -> Iterator[Callable[..., ProcessDaemon]]:
    """Start `python -m gpuallocd` as a child process."""
    started: list[ProcessDaemon] = []

    def start(wait: bool = True, **settings: Any) -> ProcessDaemon:
        settings.setdefault("default_policy", "simple")
        daemon = ProcessDaemon(paths, **settings).start(wait=wait)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.kill()


@pytest.fixture
def unit_daemon(paths: DaemonPaths) -> Iterator[Callable[..., ProcessDaemon]]:
    """Start `python -m gpuallocd` as root holding only the capabilities that
    `systemd/gpuallocd.service` grants (its CapabilityBoundingSet=), read from the unit."""
    if os.geteuid() != 0:
        pytest.skip("dropping capabilities the unit's way needs root")
    started: list[ProcessDaemon] = []

    def start(wait: bool = True, **settings: Any) -> ProcessDaemon:
        settings.setdefault("default_policy", "simple")
        bounding = shipped_unit().capabilities
        daemon = ProcessDaemon(paths, bounding_set=bounding, **settings).start(wait=wait)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.kill()
