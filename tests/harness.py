"""Real daemons for tests: in a thread of the test process, or as a separate process.

Both serve the real API on a real Unix socket in a short temporary directory, over a real
SQLite ledger; tests talk to them with the real client and CLI.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulease import Client, DaemonUnavailable

from gpuallocd.allocator.leases.deadlines import boottime
from gpuallocd.daemon import Daemon
from gpuallocd.daemon.config.loading import load_config
from gpuallocd.inventory import Inventory, open_inventory
from tests.service_unit import ServiceUnit

DEFAULT_INVENTORY = "example:workstation-4gpu-nvbridge"


def write_config(path: Path, settings: dict[str, Any]) -> Path:
    lines = []
    for key, value in settings.items():
        rendered = f'"{value}"' if isinstance(value, str) else repr(value)
        lines.append(f"{key} = {rendered}")
    path.write_text("\n".join(lines) + "\n")
    return path


def ctl_argv(socket: Path, *args: str) -> list[str]:
    """The command line of `gpuallocctl --socket SOCKET ARGS...` in a process of its own."""
    return [sys.executable, "-m", "gpuallocd.cli", "--socket", str(socket), *args]


def wait_for(
    condition: Callable[[], bool],
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
) -> None:
    """Return once `condition()` holds; fail after `timeout` seconds (an upper bound only),
    naming `what` was awaited."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout:g} s")
        time.sleep(interval)


class HandClock:
    """A clock the test sets by hand (thread-safe: a daemon thread reads it), counting reads."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now
        self.reads = 0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.reads += 1
            return self.now

    def step(self, seconds: float) -> None:
        """Move the clock by `seconds`; back when negative."""
        with self._lock:
            self.now += seconds


def wait_until_serving(socket_path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with Client(socket_path, timeout=2) as client:
                client.health()
            return
        except DaemonUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@dataclass
class DaemonPaths:
    root: Path
    socket: Path = field(init=False)
    state_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.socket = self.root / "gpuallocd.sock"
        self.state_dir = self.root / "state"


class ThreadDaemon:
    """A daemon running on its own event loop in a thread of the test process."""

    def __init__(
        self,
        paths: DaemonPaths,
        inventory: str = DEFAULT_INVENTORY,
        clock: Callable[[], float] = time.time,
        inventory_opener: Callable[[str], Inventory] = open_inventory,
        monotonic: Callable[[], float] | None = None,
        initialise: bool = True,
        **settings: Any,
    ) -> None:
        """A test that moves `clock` by hand moves expiry with it, unless it gives a
        `monotonic` clock of its own; `initialise` is `gpuallocd --init`."""
        self.paths = paths
        self._monotonic = monotonic or (boottime if clock is time.time else clock)
        self._initialise = initialise
        self._inventory_opener = inventory_opener
        self.config = load_config(
            None,
            socket=str(paths.socket),
            state_dir=str(paths.state_dir),
            inventory=inventory,
            **settings,
        )
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._daemon: Daemon | None = None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> ThreadDaemon:
        started = threading.Event()

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._daemon = Daemon(
                self.config,
                reload_config=lambda: self.config,  # what `reload` set
                clock=self._clock,
                inventory_opener=self._inventory_opener,
                monotonic=self._monotonic,
                initialise=self._initialise,
            )
            started.set()
            await self._daemon.run()

        def target() -> None:
            try:
                asyncio.run(main())
            except BaseException as exc:
                self.error = exc
                started.set()

        self._thread = threading.Thread(target=target, name="test-daemon", daemon=True)
        self._thread.start()
        started.wait(10)
        if self.error is not None:
            raise self.error
        wait_until_serving(self.paths.socket)
        return self

    def reload(self, **changes: Any) -> None:
        """The config with `changes`, adopted as a SIGHUP adopts a rewritten config file (on
        the daemon's loop; `wait_for` what it changes)."""
        assert self._loop is not None and self._daemon is not None
        self.config = dataclasses.replace(self.config, **changes)
        self._loop.call_soon_threadsafe(self._daemon.reload)

    def stop(self) -> None:
        if self._loop is not None and self._daemon is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._daemon.request_stop)
            self._thread.join(20)
            self._loop = None

    def client(self, **options: Any) -> Client:
        return Client(self.paths.socket, **options)


class ProcessDaemon:
    """`python -m gpuallocd` as a child process."""

    def __init__(
        self,
        paths: DaemonPaths,
        inventory: str = DEFAULT_INVENTORY,
        initialise: bool = True,
        bounding_set: Sequence[str] | None = None,
        **settings: Any,
    ) -> None:
        """`bounding_set`: run as root with only these capabilities (`setpriv`), as the unit
        runs it (tests/service_unit.py); None: with every capability of the test process."""
        self.paths = paths
        self.inventory = inventory
        self.initialise = initialise
        self.bounding_set = bounding_set
        self.config_file = write_config(paths.root / "gpuallocd.toml", settings)
        self.process: subprocess.Popen[str] | None = None

    def command(self) -> list[str]:
        prefix: list[str] = []
        if self.bounding_set is not None:
            prefix = ServiceUnit(tuple(self.bounding_set), (), ()).setpriv_prefix()
        return [
            *prefix,
            sys.executable,
            "-m",
            "gpuallocd",
            "--socket",
            str(self.paths.socket),
            "--state-dir",
            str(self.paths.state_dir),
            "--inventory",
            self.inventory,
            "--config",
            str(self.config_file),
            *(["--init"] if self.initialise else []),
        ]

    def start(self, wait: bool = True) -> ProcessDaemon:
        env = {k: v for k, v in os.environ.items() if k != "GPUALLOCD_SOCKET"}
        self.log_path = self.paths.root / f"daemon-{time.monotonic_ns()}.log"
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, text=True, env=env
            )
        if wait:
            try:
                wait_until_serving(self.paths.socket)
            except DaemonUnavailable:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"the daemon did not start: {self.stderr()}") from None
        return self

    def signal(self, sig: int) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def stop(self, timeout: float = 20.0) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def stderr(self) -> str:
        """What the daemon printed (stdout and stderr)."""
        return self.log_path.read_text()

    def client(self, **options: Any) -> Client:
        return Client(self.paths.socket, **options)
