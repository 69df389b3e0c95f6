"""Helpers for the tests of a shared node's rules: a daemon from a config file, a clock that
tests move forward, and proof that the daemon has taken a sample."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpuallocd.daemon.config.loading import load_config
from gpuallocd.inventory import Inventory, open_inventory
from tests.harness import DaemonPaths, ThreadDaemon


class SteppedClock:
    """Wall time plus an offset that a test moves forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def daemon_with_config(
    paths: DaemonPaths,
    text: str,
    *,
    clock: Callable[[], float] = time.time,
    inventory_opener: Callable[[str], Inventory] = open_inventory,
    **settings: Any,
) -> ThreadDaemon:
    """A daemon (not started) that reads `text` as its config file (limits included)."""
    config_file = paths.root / "gpuallocd.toml"
    config_file.write_text(text)
    daemon = ThreadDaemon(paths, clock=clock, inventory_opener=inventory_opener, **settings)
    settings.setdefault("inventory", daemon.config.inventory)
    daemon.config = load_config(
        config_file,
        environ={},
        socket=str(paths.socket),
        state_dir=str(paths.state_dir),
        **settings,
    )
    return daemon
