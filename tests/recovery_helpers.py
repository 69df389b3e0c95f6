"""A node for the recovery tests as real users: the daemon as shipped (its own process), a
recorded 8-GPU machine whose live processes the test names, users' leases and jobs, a
stop, a damage to the ledger, `gpuallocd --recover`, and the daemon started again."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuallocd.inventory import open_inventory
from tests.harness import DaemonPaths, ProcessDaemon
from tests.ledger_damage import fill_history, recover
from tests.system_users import SystemUsers
from tests.unleased_helpers import MACHINE, SLEEPER, Node

GPUS = [gpu.uuid for gpu in open_inventory(f"nvml-recording:{MACHINE}").topology().gpus]
LEASE_LINE = re.compile(r"lease ([0-9a-f]{12}): GPU")


def carrying(lease_id: str, devices: str, code: str = SLEEPER) -> str:
    """Python code that runs `code` in a process whose environment names `lease_id` and
    `devices` as `gpu_lease` exports them (set at its exec, so /proc shows them)."""
    env = {"GPUALLOCD_LEASE_ID": lease_id, "CUDA_VISIBLE_DEVICES": devices}
    return (
        "import os, sys; "
        f"os.execve(sys.executable, [sys.executable, '-c', {code!r}], {{**os.environ, **{env!r}}})"
    )


@dataclass
class Held:
    """An active lease as the ledger file has it."""

    owner_uid: int
    owner: str
    units: frozenset[str]
    label: str | None
    bound: bool


def leases_in(ledger: Path) -> dict[str, Held]:
    """Every active lease of the ledger at `ledger`, read from the file."""
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT l.id, l.owner_uid, l.owner_name, l.label, l.bound, g.gpu_uuid FROM leases l "
            "LEFT JOIN lease_gpus g ON g.lease_id = l.id AND g.active = 1 "
            "WHERE l.state = 'active'"
        ).fetchall()
    finally:
        conn.close()
    found: dict[str, Held] = {}
    for lease_id, uid, name, label, bound, unit in rows:
        held = found.setdefault(lease_id, Held(uid, name, frozenset(), label, bool(bound)))
        if unit is not None:
            held.units = held.units | {unit}
    return found


USERS = ("alice", "bob", "carol", "dave")


class Crash:
    """One daemon's life through a crash: serve, stop, damage, recover, serve again.

    `limits`: config text added to the settings, where `{alice}` etc. stand for the users'
    real names."""

    def __init__(
        self, users: SystemUsers, node: Node, paths: DaemonPaths, limits: str, **settings: Any
    ) -> None:
        self.users = users
        self.node = node
        self.paths = paths
        self._limits = limits.format(**{short: users.name(short) for short in USERS})
        self._settings = {
            "default_policy": "simple",
            "ledger_backups": 0,
            "sample_interval_seconds": 0.2,
            **settings,
        }
        self.ledger = paths.state_dir / "ledger.sqlite3"
        self.started: list[ProcessDaemon] = []
        self.daemon = self.serve(initialise=True)

    def serve(self, initialise: bool = False) -> ProcessDaemon:
        daemon = ProcessDaemon(
            self.paths, inventory=self.node.inventory, initialise=initialise, **self._settings
        )
        with open(daemon.config_file, "a") as config:
            config.write(self._limits)
        self.started.append(daemon)
        self.daemon = daemon.start()
        return daemon

    def name(self, user: str) -> str:
        return self.users.name(user)

    def uid(self, user: str) -> int:
        return self.users.uid(user)

    def allocate(self, user: str, *args: str) -> dict[str, Any]:
        done = self.users.ctl(
            user, self.paths.socket, "--json", "allocate", "--ttl", "1h", *(args or ("-n", "1"))
        )
        assert done.returncode == 0, done.stderr
        lease: dict[str, Any] = json.loads(done.stdout)
        return lease

    def fill(self, pairs: int = 40) -> None:
        fill_history(self.daemon, pairs)

    def stop(self) -> None:
        assert self.daemon.stop() == 0, self.daemon.stderr()

    def recover(self) -> list[str]:
        """`gpuallocd --recover` as the service runs it; its lines (without the log prefix)."""
        done = recover(self.daemon)
        assert done.returncode == 0, done.stderr
        return [
            line.split("recovery: ", 1)[1]
            for line in done.stderr.splitlines()
            if "recovery: " in line
        ]

    def run(self, user: str, command: str, log: Path) -> subprocess.Popen[str]:
        """`gpuallocctl run -- python -c COMMAND` as `user`, started; its output in `log`."""
        argv = ["-m", "gpuallocd.cli", "--socket", str(self.paths.socket), "run", "--ttl", "1h"]
        return self.users.start(user, [*argv, "--", self.users.python, "-c", command], log)

    def close(self) -> None:
        for daemon in self.started:
            if daemon.process is not None and daemon.process.poll() is None:
                daemon.kill()


def lines_with(lines: list[str], *words: str) -> list[str]:
    """The lines that hold every one of `words`."""
    return [line for line in lines if all(word in line for word in words)]


@pytest.fixture
def crash(
    system_users: SystemUsers, node: Node, paths: DaemonPaths
) -> Iterator[Callable[..., Crash]]:
    """Make the node's daemon (limits as config text, settings as keywords); killed at the end."""
    made: list[Crash] = []

    def make(limits: str = "", **settings: Any) -> Crash:
        made.append(Crash(system_users, node, paths, limits, **settings))
        return made[-1]

    yield make
    for each in made:
        each.close()
