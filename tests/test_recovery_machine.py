"""What the machine proves, after a ledger is lost: a GPU that NVML shows in use and that no
recovered lease explains is held (not free) until its process ends, then free again; a
process that forges a lease id in its environment gets nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from gpuallocd.daemon.config.loading import load_config
from gpuallocd.daemon.ledger_care.recovery import recover
from gpuallocd.inventory import Inventory, open_inventory
from gpuallocd.model import GpuProcess, LiveState, Topology
from gpuallocd.processes.lease_environ import lease_carriers
from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.ledger_damage import active_leases, damage
from tests.system_users import SystemUsers, open_to_everyone

INVENTORY = "example:workstation-4gpu-nvbridge"


class BusyInventory:
    """The example machine, with NVML showing process `pid` on GPU `uuid` (a fake of what
    this machine lacks: a GPU)."""

    def __init__(self, pid: int, index: int) -> None:
        self._inner = open_inventory(INVENTORY)
        self._pid = pid
        self.uuid = self._inner.topology().gpus[index].uuid

    def topology(self) -> Topology:
        return self._inner.topology()

    def rescan(self) -> Topology:
        return self._inner.rescan()

    def sample(self) -> Mapping[str, LiveState]:
        states = dict(self._inner.sample())
        states[self.uuid] = LiveState(processes=(GpuProcess(self._pid, uid=os.geteuid()),))
        return states

    def close(self) -> None:
        self._inner.close()


def test_an_unexplained_gpu_in_use_is_held_until_its_process_ends(paths: DaemonPaths) -> None:
    """A GPU NVML shows in use that no recovered lease explains is held for its one user's
    process until that process ends, then free; a made-up lease id in an environment gets
    nothing and is named."""
    daemon = ThreadDaemon(paths, inventory=INVENTORY, ledger_backups=0).start()
    with daemon.client() as client:
        for _ in range(120):
            client.free(client.allocate(1).id)
        kept = client.allocate_specific([0])
    daemon.stop()
    ledger = paths.state_dir / "ledger.sqlite3"
    damage(ledger, where="start")  # nothing readable, and no backup: only the machine
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    # A forger: a lease id the daemon never granted, every GPU named: no record knows the
    # id, and NVML shows it on no GPU: it is named and gets nothing.
    forged = {**os.environ, "GPUALLOCD_LEASE_ID": "abcdefabcdef", "CUDA_VISIBLE_DEVICES": "0,1,3"}
    forger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=forged)
    ours = {worker.pid, forger.pid}
    try:
        config = load_config(
            None, socket=str(paths.socket), state_dir=str(paths.state_dir), inventory=INVENTORY
        )
        inventory: Inventory = BusyInventory(worker.pid, 2)
        wait_for(lambda: any(c.pid == forger.pid for c in lease_carriers()), 30, what="forger")
        outcome = recover(
            config,
            inventory_opener=lambda _: inventory,
            carriers=lambda: [c for c in lease_carriers() if c.pid in ours],
        )
        held = f"held: GPU 2 ({inventory.uuid}) for root, bound to pid {worker.pid}"
        assert any(line.startswith(held) for line in outcome.held), outcome.lines()
        assert any(
            f"pid {forger.pid} carries GPUALLOCD_LEASE_ID=abcdefabcdef" in line
            for line in outcome.notes
        ), outcome.lines()
        found = active_leases(ledger)
        ((units, label),) = found.values()
        assert units == {inventory.uuid}
        assert label == f"recovered: in use by root (pid {worker.pid})"
        assert kept.id not in found  # lost with the file: no process carries it

        restarted = ThreadDaemon(paths, inventory=INVENTORY, initialise=False).start()
        try:
            with restarted.client() as client:
                state = {gpu.uuid: gpu.state for gpu in client.status()}
                assert state[inventory.uuid] == "leased"
                worker.kill()
                worker.wait()
                wait_for(lambda: not client.leases(), 60, what="the hold to end with its process")
                assert {gpu.state for gpu in client.status()} == {"free"}
        finally:
            restarted.stop()
    finally:
        for process in (worker, forger):
            process.kill()
            process.wait()
    assert list(Path(paths.state_dir, "damaged").iterdir())


NAMED_TWICE = """
import ctypes
def array(items):
    return (ctypes.c_char_p * (len(items) + 1))(*items, None)
environ = [b"GPUALLOCD_LEASE_ID=aaaaaaaaaaaa", b"GPUALLOCD_LEASE_ID=bbbbbbbbbbbb"]
ctypes.CDLL(None).execve(b"/bin/sleep", array([b"sleep", b"600"]), array(environ))
"""


def test_an_environment_naming_the_lease_id_twice_carries_no_lease() -> None:
    """A process whose environment gives GPUALLOCD_LEASE_ID twice (getenv reads the first,
    a loader or a shell the last) carries no lease id for a recovery; one that gives it once
    does."""
    twice = subprocess.Popen([sys.executable, "-c", NAMED_TWICE])
    once = subprocess.Popen(
        ["/bin/sleep", "600"], env={"GPUALLOCD_LEASE_ID": "cccccccccccc", "PATH": "/bin"}
    )
    try:
        wait_for(
            lambda: Path(f"/proc/{twice.pid}/comm").read_text().strip() == "sleep",
            30,
            what="the exec with the name given twice",
        )
        assert Path(f"/proc/{twice.pid}/environ").read_bytes().count(b"GPUALLOCD_LEASE_ID=") == 2
        carried = {c.pid: c.lease_id for c in lease_carriers() if c.pid in (twice.pid, once.pid)}
        assert carried == {once.pid: "cccccccccccc"}
    finally:
        for process in (twice, once):
            process.kill()
            process.wait()


def _uids(pid: int) -> list[int]:
    """The real, effective, saved and file system uids of a process, as the kernel says."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return [int(uid) for uid in line.split()[1:]]
    return []


def test_a_set_user_id_program_carries_no_lease_id(
    system_users: SystemUsers, short_dir: Path
) -> None:
    """bob's set-user-ID-root copy of `sleep`, started with a lease id in its environment
    (its effective uid root's, its real uid bob's), carries nothing for a recovery: it is
    nobody's own process; his plain process carrying an id carries it, as his."""
    open_to_everyone(short_dir)
    program = short_dir / "setuid-sleep"
    program.write_bytes(Path("/bin/sleep").read_bytes())
    program.chmod(0o4755)
    code = (
        "import os, sys; os.execve(sys.argv[1], ['sleep', '600'], "
        "{**os.environ, 'GPUALLOCD_LEASE_ID': sys.argv[2]})"
    )
    started = [
        system_users.start("bob", ["-c", code, path, lease_id], short_dir / f"{lease_id}.log")
        for path, lease_id in ((str(program), "aaaaaaaaaaaa"), ("/bin/sleep", "bbbbbbbbbbbb"))
    ]
    try:
        bob = system_users.uid("bob")
        wait_for(lambda: _uids(started[0].pid)[:2] == [bob, 0], 30, what="the set-user-ID exec")
        wait_for(lambda: b"bbbb" in Path(f"/proc/{started[1].pid}/environ").read_bytes(), 30)
        ours = {process.pid for process in started}
        carried = {c.pid: (c.uid, c.lease_id) for c in lease_carriers() if c.pid in ours}
        assert carried == {started[1].pid: (bob, "bbbbbbbbbbbb")}
    finally:
        for process in started:
            process.kill()
            process.wait()
