"""Memory shares against a real daemon over the recorded DGX A100 (80 GiB A100s; GPU 0 runs
someone else's process, GPU 7 is in MIG mode), with `shared_gpus = ["all"]`."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpulease import GpuallocError, GpuBusy, GpusUnavailable, InvalidRequest, Lease, gpu_lease

from gpuallocd.allocator import AllocateSpec, AllocatorSettings, LeaseLifecycle
from gpuallocd.allocator.leases.parts import SharedParts
from gpuallocd.cli import cli
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller
from gpuallocd.testing import nvml_inventory
from tests.harness import DaemonPaths, ThreadDaemon, ctl_argv
from tests.local_users import LocalUser, run_as

GIB = 2**30
CAPACITY = 79 * GIB  # 80 GiB less the default 1 GiB reserve
SharedDaemon = Callable[..., ThreadDaemon]


@pytest.fixture
def shared(start_daemon: SharedDaemon) -> ThreadDaemon:
    """Every GPU shared (GPU 7 is in MIG mode, so it is not)."""
    return start_daemon(inventory="nvml-recording:dgx-a100-mig", shared_gpus=("all",))


def share_sums(daemon: ThreadDaemon) -> dict[str, int]:
    """The active shares' bytes per GPU, read straight from the ledger file."""
    path = Path(daemon.config.ledger_path)
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn, conn:
        rows = conn.execute(
            "SELECT gpu_of, SUM(memory_bytes) FROM lease_gpus "
            "WHERE active = 1 AND kind = 'share' GROUP BY gpu_of"
        ).fetchall()
    return dict(rows)


def test_two_20g_shares_pack_on_one_gpu_and_a_whole_gpu_goes_elsewhere(
    shared: ThreadDaemon,
) -> None:
    """gpu_lease(memory="20G") exports the share; a second share joins it; a whole GPU does not."""
    with gpu_lease(1, memory="20G", socket=shared.paths.socket) as first:
        assert os.environ["GPUALLOCD_MEMORY_BYTES"] == str(20 * GIB)
        gpu = os.environ["CUDA_VISIBLE_DEVICES"]
        assert first.uuids == (gpu,) and first.gpus[0].kind == "share"
        with shared.client() as client:
            second = client.allocate(memory_bytes=20 * GIB)
            whole = client.allocate(1)
            assert second.uuids == (gpu,) and whole.uuids[0] != gpu
            (status,) = [s.raw for s in client.status() if s.uuid == gpu]
    assert "GPUALLOCD_MEMORY_BYTES" not in os.environ
    assert status["state"] == "shared" and status["share_capacity_bytes"] == CAPACITY
    assert sorted(s["lease_id"] for s in status["shares"]) == sorted([first.id, second.id])
    assert [s["memory_bytes"] for s in status["shares"]] == [20 * GIB] * 2


def test_concurrent_shares_never_over_commit_a_gpu(shared: ThreadDaemon) -> None:
    """Twelve clients ask at once for 30 GiB of one GPU: two fit in 79 GiB, ten are refused."""
    with shared.client() as client:
        target = client.allocate(memory_bytes=GIB).uuids[0]
    outcomes: list[Lease | GpuallocError] = []
    lock = threading.Lock()

    def ask() -> None:
        with shared.client() as client:
            try:
                outcome: Lease | GpuallocError = client.allocate(
                    gpus=[target], memory_bytes=30 * GIB
                )
            except GpuallocError as exc:
                outcome = exc
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=ask) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    granted = [o for o in outcomes if isinstance(o, Lease)]
    assert len(granted) == 2
    assert all(isinstance(o, GpuBusy) for o in outcomes if not isinstance(o, Lease))
    assert share_sums(shared) == {target: 61 * GIB}


def test_shares_fill_every_shared_gpu_and_then_are_refused(shared: ThreadDaemon) -> None:
    """Three 20 GiB shares per 80 GiB GPU on the six shareable GPUs; the 19th is refused."""
    with shared.client() as client:
        leases = [client.allocate(memory_bytes=20 * GIB) for _ in range(18)]
        with pytest.raises(GpusUnavailable, match="have that much left to share"):
            client.allocate(memory_bytes=20 * GIB)
        with pytest.raises(GpusUnavailable):
            client.allocate(1)  # every GPU but 0 (in use) and 7 (MIG) holds shares
    sums = share_sums(shared)
    assert len(sums) == 6 and all(total == 60 * GIB <= CAPACITY for total in sums.values())
    assert len({lease.uuids for lease in leases}) == 6


def test_a_share_never_lands_on_a_whole_leased_gpu_or_the_reverse(shared: ThreadDaemon) -> None:
    """Naming a GPU leased whole for a share is gpu_busy, and naming a shared GPU whole too."""
    with shared.client() as client:
        whole = client.allocate(gpus=[3])
        with pytest.raises(GpuBusy, match="GPU 3 cannot take a share"):
            client.allocate(gpus=[3], memory_bytes=GIB)
        share = client.allocate(gpus=[4], memory_bytes=GIB)
        with pytest.raises(GpuBusy):
            client.allocate(gpus=[4])
        client.free(whole.id)
        client.free(share.id)


def test_allocate_memory_on_two_gpus_from_the_cli(shared: ThreadDaemon) -> None:
    """`allocate -n 2 --memory 20G` is 20 GiB on each of two distinct GPUs."""
    result = CliRunner().invoke(
        cli, ["--socket", str(shared.paths.socket), "allocate", "-n", "2", "--memory", "20G"]
    )
    assert result.exit_code == 0, result.output
    assert f"GPUALLOCD_MEMORY_BYTES={20 * GIB}" in result.output
    with shared.client() as client:
        (lease,) = client.leases()
    assert len(set(lease.uuids)) == 2 and lease.memory_bytes == 20 * GIB


def test_gpuallocctl_run_exports_the_share(shared: ThreadDaemon) -> None:
    """`run --memory 512M` gives the command its GPU and GPUALLOCD_MEMORY_BYTES."""
    script = "import os; print(os.environ['GPUALLOCD_MEMORY_BYTES'])"
    result = subprocess.run(
        ctl_argv(
            shared.paths.socket, "run", "--memory", "512M", "--", sys.executable, "-c", script
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(512 * 2**20)


def test_shares_need_shared_gpus_and_a_size_that_fits(start_daemon: SharedDaemon) -> None:
    """By default no GPU is shared; a share larger than a GPU is explained, not queued."""
    daemon = start_daemon(inventory="nvml-recording:dgx-a100-mig")
    with daemon.client() as client, pytest.raises(InvalidRequest, match="shared_gpus"):
        client.allocate(memory_bytes=GIB)
    daemon.stop()
    daemon = start_daemon(inventory="nvml-recording:dgx-a100-mig", shared_gpus=("2", "3"))
    with daemon.client() as client:
        with pytest.raises(InvalidRequest, match="more than a shared GPU holds"):
            client.allocate(memory_bytes=80 * GIB)
        with pytest.raises(InvalidRequest, match="GPU 5 is not shared"):
            client.allocate(gpus=[5], memory_bytes=GIB)
        assert client.allocate(memory_bytes=GIB).gpus[0].index in (2, 3)


def test_two_users_share_one_gpu_and_neither_is_foreign(tmp_path: Path) -> None:
    """Shares of two users on one GPU: each one's process is expected there, not `in-use`."""
    inventory, fake = nvml_inventory("dgx-a100-mig")
    try:
        ledger = Ledger(tmp_path / "ledger.sqlite3")
        settings = AllocatorSettings(shared_gpus=("all",), share_memory_reserve_bytes=GIB)
        parts = SharedParts.of(ledger, inventory.topology(), clock=lambda: 1.0, settings=settings)
        lifecycle = LeaseLifecycle(ledger, parts, clock=lambda: 1.0)
        spec = AllocateSpec(count=1, memory_bytes=20 * GIB)
        bo = lifecycle.allocate(Caller(uid=os.getuid() + 1, gid=1, pid=2, user="bo"), spec)
        ana = lifecycle.allocate(Caller(uid=os.getuid(), gid=0, pid=1, user="ana"), spec)
        assert ana.uuids == bo.uuids
        fake.set_processes(ana.uuids[0], [(os.getpid(), GIB)])  # a process of ana's uid
        lifecycle.update_live(inventory.sample())
        (status,) = [s for s in lifecycle.gpu_status() if s.gpu.uuid == ana.uuids[0]]
        assert (status.state, status.foreign_pids) == ("shared", ())
        assert [lease.owner_name for lease, _ in status.shares] == ["bo", "ana"]
        ledger.close()
    finally:
        inventory.close()


SHARE_20G_AND_HOLD = (
    "import sys, json\n"
    "from gpulease import Client\n"
    "c = Client()\n"
    "lease = c.allocate(1, memory_bytes=20 * 2**30, ttl=600)\n"
    "print(json.dumps({'id': lease.id, 'gpu': lease.raw['gpus'][0]['parent_uuid'] or "
    "lease.raw['gpus'][0]['uuid'], 'owner': lease.owner_uid}), flush=True)\n"
    "sys.stdin.read()\n"
)


def test_two_real_users_each_lease_20g_of_one_gpu_against_the_daemon(
    start_daemon: SharedDaemon,
    open_paths: DaemonPaths,
    users: tuple[LocalUser, LocalUser],
    user_processes: list[subprocess.Popen[str]],
) -> None:
    """Two users (real uids, as the kernel reports them) each lease 20 GiB; both shares land on
    one GPU, and a whole-GPU request of root's goes to another GPU."""
    daemon = start_daemon(inventory="nvml-recording:dgx-a100-mig", shared_gpus=("all",))
    granted = []
    for user in users:
        holder = run_as(user, SHARE_20G_AND_HOLD, daemon.paths.socket, stdin=subprocess.PIPE)
        user_processes.append(holder)
        assert holder.stdout is not None
        granted.append(json.loads(holder.stdout.readline()))
    assert [g["owner"] for g in granted] == [u.uid for u in users]
    assert granted[0]["gpu"] == granted[1]["gpu"]
    with daemon.client() as client:
        whole = client.allocate(1)
        assert whole.gpus[0].uuid != granted[0]["gpu"]
        owners = {lease.owner_uid for lease in client.leases()}
    assert owners == {users[0].uid, users[1].uid, 0}
