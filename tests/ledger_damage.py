"""What the recovery tests share: damaging a ledger on disk, running `gpuallocd --recover`,
reading a ledger's active leases straight from its file, and a process that carries a lease."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.harness import ProcessDaemon

CRASH_ENV = {"GPUALLOCD_TEST_FAULTS": "kill-this-daemon"}


def damage(path: Path, seed: int = 33, where: str = "middle") -> None:
    """Overwrite 4 KiB in the middle of the file (or at its start, `where="start"`: SQLite
    reads nothing of it then) with noise (fixed seed: the same damage each run)."""
    size = os.path.getsize(path)
    assert size > 16 * 1024, f"the ledger is too small to damage in the middle ({size} bytes)"
    noise = random.Random(seed).randbytes(4096)
    with open(path, "r+b") as ledger:
        ledger.seek(0 if where == "start" else size // 2 - 2048)
        ledger.write(noise)
        ledger.flush()
        os.fsync(ledger.fileno())


def damage_btrees(path: Path, *names: str, seed: int = 36) -> list[int]:
    """Overwrite every page of the named tables and indexes (b-trees) with noise, and no other
    page: the rest of the ledger reads as it did. The write-ahead log is checkpointed first
    (the daemon is stopped). Returns the pages overwritten."""
    conn = sqlite3.connect(str(path))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        marks = ", ".join("?" for _ in names)
        query = f"SELECT DISTINCT pageno FROM dbstat WHERE name IN ({marks})"
        pages = sorted(int(row[0]) for row in conn.execute(query, names))
        size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()
    assert pages and 1 not in pages, f"no pages of {names} to damage apart from the first"
    noise = random.Random(seed)
    with open(path, "r+b") as ledger:
        for page in pages:
            ledger.seek((page - 1) * size)
            ledger.write(noise.randbytes(size))
        ledger.flush()
        os.fsync(ledger.fileno())
    return pages


def recover(
    daemon: ProcessDaemon, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`gpuallocd --recover` with the daemon's own options."""
    argv = [arg for arg in daemon.command() if arg != "--init"] + ["--recover"]
    environ = {k: v for k, v in os.environ.items() if k != "GPUALLOCD_SOCKET"}
    environ.update(env or {})
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=environ)


def start_refused(daemon: ProcessDaemon) -> tuple[int, str]:
    """Start the daemon (no --init) and return its exit code and what it printed."""
    daemon.initialise = False
    daemon.start(wait=False)
    assert daemon.process is not None
    code = daemon.process.wait(60)
    return code, daemon.stderr()


def active_leases(ledger: Path) -> dict[str, tuple[frozenset[str], str | None]]:
    """Each active lease's id: its active units and label, read from the file."""
    conn = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT l.id, g.gpu_uuid, l.label FROM leases l JOIN lease_gpus g "
            "ON g.lease_id = l.id WHERE l.state = 'active' AND g.active = 1"
        ).fetchall()
    finally:
        conn.close()
    found: dict[str, tuple[set[str], str | None]] = {}
    for lease_id, uuid, label in rows:
        found.setdefault(lease_id, (set(), label))[0].add(uuid)
    return {k: (frozenset(v[0]), v[1]) for k, v in found.items()}


def carrier(lease_id: str, uuids: tuple[str, ...]) -> subprocess.Popen[bytes]:
    """A process that carries a lease as `gpu_lease` exports it, and sleeps."""
    env = {**os.environ, "GPUALLOCD_LEASE_ID": lease_id, "CUDA_VISIBLE_DEVICES": ",".join(uuids)}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env)


def fill_history(daemon: ProcessDaemon, pairs: int) -> None:
    """Allocate and free `pairs` times: a ledger of some size, as a used one is."""
    with daemon.client() as client:
        for _ in range(pairs):
            client.free(client.allocate(1).id)
