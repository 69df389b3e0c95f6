"""Long reads hold nobody else up: while one user's `history` or `usage` read is held inside
the ledger, another user allocates and frees, answered as usual, on a real daemon.

The read is held by a gate around the real read (it waits for the test, then reads): that
stands for a read of a big ledger that takes as long as the test wants, without timing."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuallocd.ledger import Ledger, LedgerReader
from gpuallocd.model import Gpu, Lease, LeasedGpu, LeaseState
from gpuallocd.model.energy import EnergyUse
from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.rules_harness import daemon_with_config
from tests.system_users import SystemUsers, open_to_everyone

READ = """
import sys
from gpulease import Client
with Client(sys.argv[1], timeout=120) as c:
    print(len(c.history(limit=10000)) if sys.argv[2] == "history" else c.usage(since=0.0)["until"])
"""

PAIR = """
import sys
from gpulease import Client
with Client(sys.argv[1], timeout=10) as c:
    c.free(c.allocate(1).id)
print("answered")
"""


class Gate:
    """Holds every call of the wrapped reads until opened; says when one is held."""

    def __init__(self) -> None:
        self.held = threading.Event()
        self.opened = threading.Event()

    def around(self, read: Callable[..., Any]) -> Callable[..., Any]:
        def gated(*args: Any, **kwargs: Any) -> Any:
            self.held.set()
            self.opened.wait(60)
            return read(*args, **kwargs)

        return gated


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    gate = Gate()
    for name in ("history_json", "usage"):
        monkeypatch.setattr(LedgerReader, name, gate.around(getattr(LedgerReader, name)))
    yield gate
    gate.opened.set()


@pytest.fixture
def node(
    system_users: SystemUsers, short_dir: Path, paths: DaemonPaths
) -> Iterator[tuple[ThreadDaemon, SystemUsers]]:
    open_to_everyone(short_dir)
    daemon = daemon_with_config(paths, 'default_policy = "simple"\n').start()
    yield daemon, system_users
    daemon.stop()


@pytest.mark.parametrize("read", ["history", "usage"])
def test_a_held_read_of_one_user_delays_no_allocation_of_another(
    read: str, gate: Gate, node: tuple[ThreadDaemon, SystemUsers], short_dir: Path
) -> None:
    """alice's read is held inside the ledger; bob's allocate and free are answered
    meanwhile; alice is answered once the read goes on."""
    daemon, users = node
    socket = str(daemon.paths.socket)
    log = short_dir / "alice.log"
    reader = users.start("alice", ["-c", READ, socket, read], log)
    try:
        wait_for(gate.held.is_set, 30, what="alice's read held")
        pair = users.run("bob", ["-c", PAIR, socket], timeout=60)
        assert (pair.returncode, pair.stdout.strip()) == (0, "answered"), pair.stderr
        assert reader.poll() is None  # alice's read is still held
        gate.opened.set()
        assert reader.wait(30) == 0, log.read_text()
    finally:
        gate.opened.set()
        if reader.poll() is None:
            reader.kill()
            reader.wait(10)


def test_the_history_sqlite_renders_is_the_models_json(tmp_path: Path) -> None:
    """The history document built in SQL reads back as `HistoryEvent.to_json()` of the same
    events, times to the last bit, details with quotes and control characters included."""
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    ledger.sync_gpus([Gpu("GPU-a", 0)], 0.0)
    for n in range(5):
        at = 1795664155.828242 + n / 7
        lease = Lease(f"L{n}", (LeasedGpu("GPU-a", 0),), 5, "u", None, None, "simple", at, at + 9)
        ledger.grant(lease, 5)
        if n % 2:  # energy read for some leases, one of them an estimate
            ledger.record_energy([EnergyUse(f"L{n}", 5, "u", at, 1234.5678 * n, n == 3)])
        ledger.end([lease.ended(LeaseState.FREED, at + 0.1)], 5, f'why "{n}"\t\x01')
    reader = ledger.reader()
    try:
        for lease_id, limit in ((None, 100), (None, 3), ("L2", 100), ("none", 10)):
            built = json.loads(reader.history_json(lease_id, limit))
            assert built == [e.to_json() for e in reader.history(lease_id, limit)]
        assert [e["energy"] for e in json.loads(reader.history_json("L3"))] == [
            None,
            {"joules": 1234.5678 * 3, "kwh": 1234.5678 * 3 / 3.6e6, "estimate": True},
        ]
    finally:
        reader.close()
        ledger.close()
