"""The Jupyter provisioner with real jupyter_client and ipykernel against a real daemon.

Kernelspecs are installed by the `gpuallocd-jupyter` command into a temporary Jupyter data
directory; kernels are real ipykernel processes started by `KernelManager`; what a kernel sees
is read by running code in it over its channels; the ledger is read with the real client.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gpuallocd_jupyter import GpuallocdProvisioner, MemorySharesUnsupported, install_kernelspec
from gpuallocd_jupyter.kernelspec import kernel_json
from gpulease import GpusUnavailable, InvalidRequest, Lease
from jupyter_client import KernelManager
from jupyter_client.ioloop import AsyncIOLoopKernelManager
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.provisioning.factory import KernelProvisionerFactory

from gpuallocd.host.proc import process_start_time
from tests.harness import ThreadDaemon, wait_for

COMMAND = Path(sys.executable).parent / "gpuallocd-jupyter"
EXAMPLE = Path(__file__).resolve().parents[2] / "contrib" / "jupyter" / "examples"
TIMEOUT = 60.0  # an upper bound for a kernel to start, answer or die; never a pace

PROBE = (
    "import json, os\n"
    "print(json.dumps({'pid': os.getpid(),"
    " 'cuda': os.environ.get('CUDA_VISIBLE_DEVICES'),"
    " 'lease': os.environ.get('GPUALLOCD_LEASE_ID')}))"
)


@pytest.fixture
def jupyter_home(short_dir: Path) -> Path:
    """Jupyter's data, runtime and config directories in a temporary place."""
    for name in ("data", "runtime", "config"):
        (short_dir / name).mkdir()
    os.environ["JUPYTER_DATA_DIR"] = str(short_dir / "data")
    os.environ["JUPYTER_RUNTIME_DIR"] = str(short_dir / "runtime")
    os.environ["JUPYTER_CONFIG_DIR"] = str(short_dir / "config")
    os.environ["JUPYTER_PATH"] = str(short_dir / "data")
    return short_dir


@pytest.fixture
def kernels() -> Iterator[Callable[[str], KernelManager]]:
    """Start kernels by kernelspec name; whatever is left running is shut down afterwards."""
    started: list[KernelManager] = []

    def start(name: str) -> KernelManager:
        manager = KernelManager(kernel_name=name)
        started.append(manager)
        manager.start_kernel()
        return manager

    yield start
    for manager in started:
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)


def install(daemon: ThreadDaemon, name: str, *options: str) -> None:
    """Install a kernelspec for this user with the command line, pointed at `daemon`."""
    command = [str(COMMAND), "install-kernelspec", "--name", name, "--user"]
    command += ["--socket", str(daemon.paths.socket), *options]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr


def kernel_view(manager: KernelManager) -> dict[str, Any]:
    """The kernel's own pid, CUDA_VISIBLE_DEVICES and GPUALLOCD_LEASE_ID, read inside it."""
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=TIMEOUT)
        printed: list[str] = []

        def keep_stdout(message: dict[str, Any]) -> None:
            if message["msg_type"] == "stream" and message["content"]["name"] == "stdout":
                printed.append(message["content"]["text"])

        reply = client.execute_interactive(PROBE, timeout=TIMEOUT, output_hook=keep_stdout)
        assert reply["content"]["status"] == "ok"
        view: dict[str, Any] = json.loads("".join(printed))
        return view
    finally:
        client.stop_channels()


def only_lease(daemon: ThreadDaemon) -> Lease:
    with daemon.client() as client:
        leases = client.leases()
    assert len(leases) == 1, leases
    return leases[0]


def test_kernel_runs_on_its_leased_gpus_and_frees_them_at_shutdown(
    daemon: ThreadDaemon, jupyter_home: Path, kernels: Callable[[str], KernelManager]
) -> None:
    """A started kernel sees exactly its lease's GPUs by UUID; shutdown ends the lease."""
    install(daemon, "gpu2", "--count", "2")
    manager = kernels("gpu2")
    view = kernel_view(manager)
    lease = only_lease(daemon)
    assert len(lease.gpus) == 2
    assert view["cuda"] == ",".join(lease.uuids)
    assert view["lease"] == lease.id
    assert lease.label == f"jupyter:{manager.kernel_id}"
    assert (lease.pid, lease.raw["bound_to_process"]) == (os.getpid(), True)
    manager.shutdown_kernel()
    with daemon.client() as client:
        assert client.leases() == []
        assert client.lease(lease.id).state == "freed"


@pytest.mark.parametrize("now", [False, True], ids=["polite", "now"])
def test_restarted_kernel_keeps_the_same_lease(
    daemon: ThreadDaemon,
    jupyter_home: Path,
    kernels: Callable[[str], KernelManager],
    now: bool,
) -> None:
    """After a restart the new kernel process holds the same lease and sees the same GPUs."""
    install(daemon, "gpu1", "--count", "1")
    manager = kernels("gpu1")
    before = kernel_view(manager)
    lease = only_lease(daemon)
    manager.restart_kernel(now=now)
    after = kernel_view(manager)
    assert after["pid"] != before["pid"]
    assert only_lease(daemon).id == lease.id
    assert (after["cuda"], after["lease"]) == (before["cuda"], before["lease"])
    manager.shutdown_kernel()
    with daemon.client() as client:
        assert client.leases() == []


def test_killed_kernel_frees_its_lease(
    daemon: ThreadDaemon, jupyter_home: Path, kernels: Callable[[str], KernelManager]
) -> None:
    """A kernel killed with SIGKILL, not by its manager, gives its GPUs back."""
    install(daemon, "gpu2", "--count", "2")
    manager = kernels("gpu2")
    view = kernel_view(manager)
    lease = only_lease(daemon)
    os.kill(view["pid"], signal.SIGKILL)
    with daemon.client() as client:
        wait_for(lambda: client.leases() == [], TIMEOUT)
        assert client.lease(lease.id).state == "freed"


SERVER = """
import sys, time
from jupyter_client import KernelManager
from jupyter_client.ioloop import AsyncIOLoopKernelManager
manager = KernelManager(kernel_name=sys.argv[1])
manager.start_kernel()
print(manager.provisioner.pid, flush=True)
time.sleep(3600)
"""


def test_server_killed_frees_the_lease_and_its_kernel_exits(
    daemon: ThreadDaemon, jupyter_home: Path
) -> None:
    """If the process running the provisioner dies, the daemon frees the lease bound to it and
    the orphaned kernel exits."""
    install(daemon, "gpu2", "--count", "2")
    command = [sys.executable, "-c", SERVER, "gpu2"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as server:
        try:
            assert server.stdout is not None
            kernel_pid = int(server.stdout.readline())
            assert only_lease(daemon).pid == server.pid
        finally:
            server.kill()
    with daemon.client() as client:
        wait_for(lambda: client.leases() == [], TIMEOUT)
    wait_for(lambda: process_start_time(kernel_pid) is None, TIMEOUT)


def test_restart_after_a_crash_leases_again(
    daemon: ThreadDaemon, jupyter_home: Path, kernels: Callable[[str], KernelManager]
) -> None:
    """A kernel restarted after it died on its own runs under one new lease."""
    install(daemon, "gpu1", "--count", "1")
    manager = kernels("gpu1")
    first = only_lease(daemon)
    os.kill(kernel_view(manager)["pid"], signal.SIGKILL)
    with daemon.client() as client:
        wait_for(lambda: client.leases() == [], TIMEOUT)
    manager.restart_kernel(now=True)
    view = kernel_view(manager)
    second = only_lease(daemon)
    assert second.id != first.id
    assert (view["lease"], view["cuda"]) == (second.id, ",".join(second.uuids))


async def crash_and_wait_for_autorestart(daemon: ThreadDaemon, name: str) -> tuple[Lease, Lease]:
    """Start kernel `name` under a kernel restarter as Jupyter Server does, kill -9 it, wait
    for the restarter to start a new one; the leases before and after."""
    manager = AsyncIOLoopKernelManager(kernel_name=name)
    await manager.start_kernel()
    try:
        first = only_lease(daemon)
        crashed_pid = manager.provisioner.pid
        os.kill(crashed_pid, signal.SIGKILL)
        deadline = time.monotonic() + TIMEOUT
        with daemon.client() as client:
            while not (manager.provisioner.pid != crashed_pid and client.leases()):
                assert time.monotonic() < deadline, "the kernel was not restarted in time"
                await asyncio.sleep(0.05)
        await asyncio.wait_for(manager.ready, TIMEOUT)  # the restart has finished
        return first, only_lease(daemon)
    finally:
        await manager.shutdown_kernel(now=True)


def test_kernel_restarted_by_the_restarter_after_a_crash_holds_one_new_lease(
    daemon: ThreadDaemon, jupyter_home: Path
) -> None:
    """Under an auto-restarting manager a crash frees the lease and the new kernel takes one."""
    install(daemon, "gpu1", "--count", "1")
    first, second = asyncio.run(crash_and_wait_for_autorestart(daemon, "gpu1"))
    assert second.id != first.id
    with daemon.client() as client:
        assert client.lease(first.id).state == "freed"
        assert client.leases() == []


def test_lease_is_renewed_while_the_kernel_lives(
    daemon: ThreadDaemon, jupyter_home: Path, kernels: Callable[[str], KernelManager]
) -> None:
    """With a short TTL the provisioner renews the lease, so it outlives its first TTL."""
    install(daemon, "gpu1", "--count", "1", "--ttl", "2")
    manager = kernels("gpu1")
    lease = only_lease(daemon)
    with daemon.client() as client:

        def renewed_past_first_ttl() -> bool:
            current = client.lease(lease.id)
            return current.state == "active" and current.expires_at > lease.expires_at + 2

        wait_for(renewed_past_first_ttl, TIMEOUT)
        assert any(event["event"] == "renewed" for event in client.history(lease.id))
    assert kernel_view(manager)["lease"] == lease.id


def test_kernel_does_not_start_when_the_gpus_are_taken(
    daemon: ThreadDaemon, jupyter_home: Path, kernels: Callable[[str], KernelManager]
) -> None:
    """A kernel asking for more GPUs than are free fails to start and leases nothing."""
    install(daemon, "all", "--count", "4")
    install(daemon, "one", "--count", "1")
    kernels("all")
    held = only_lease(daemon)
    with pytest.raises(GpusUnavailable):
        kernels("one")
    assert only_lease(daemon).id == held.id


def test_a_server_started_under_a_lease_gives_its_kernels_that_lease(
    daemon: ThreadDaemon, jupyter_home: Path, kernels: Callable[[str], KernelManager]
) -> None:
    """A server under a lease (GPUALLOCD_LEASE_ID, as `run -- jupyter lab` sets it): a kernel
    of one GPU runs on the lease's first GPU, takes nothing more and leaves the lease at
    shutdown; a kernel asking for more than the lease holds does not start; `--nested new`
    takes a lease of its own."""
    with daemon.client() as client:
        server_lease = client.allocate(2)
    os.environ["GPUALLOCD_LEASE_ID"] = server_lease.id
    install(daemon, "inner", "--count", "1")
    manager = kernels("inner")
    view = kernel_view(manager)
    assert (view["lease"], view["cuda"]) == (server_lease.id, server_lease.uuids[0])
    assert only_lease(daemon).id == server_lease.id
    manager.shutdown_kernel()
    assert only_lease(daemon).id == server_lease.id
    install(daemon, "bigger", "--count", "3")
    with pytest.raises(InvalidRequest, match=f"runs under lease {server_lease.id}"):
        kernels("bigger")
    install(daemon, "own", "--count", "1", "--nested", "new")
    own = kernel_view(kernels("own"))
    assert own["lease"] != server_lease.id and own["cuda"] not in server_lease.uuids


def test_memory_share_is_refused_before_leasing(
    daemon: ThreadDaemon, jupyter_home: Path, kernels: Callable[[str], KernelManager]
) -> None:
    """A kernelspec asking for a memory share fails clearly; no lease is taken."""
    config = {"count": 1, "memory": "20GiB", "socket": str(daemon.paths.socket)}
    install_kernelspec("share", kernel_json("share", config), user=True)
    with pytest.raises(MemorySharesUnsupported, match="memory"):
        kernels("share")
    with daemon.client() as client:
        assert client.leases() == []


def test_unknown_setting_in_the_kernelspec_is_refused(
    jupyter_home: Path, kernels: Callable[[str], KernelManager]
) -> None:
    """A misspelt provisioner setting stops the kernel from starting, naming the key."""
    install_kernelspec("typo", kernel_json("typo", {"cuont": 2}), user=True)
    with pytest.raises(ValueError, match="cuont"):
        kernels("typo")


def test_command_writes_the_provisioner_settings_under_a_prefix(
    jupyter_home: Path, short_dir: Path
) -> None:
    """install-kernelspec --prefix writes a python kernelspec naming the gpuallocd provisioner."""
    prefix = short_dir / "env"
    command = [str(COMMAND), "install-kernelspec", "--name", "gpu3", "--count", "3"]
    command += ["--policy", "simple", "--wait", "--ttl", "600", "--prefix", str(prefix)]
    subprocess.run(command, check=True, capture_output=True, timeout=TIMEOUT)
    os.environ["JUPYTER_PATH"] = str(prefix / "share" / "jupyter")
    spec = KernelSpecManager().get_kernel_spec("gpu3")
    assert spec.argv[1:] == ["-m", "ipykernel_launcher", "-f", "{connection_file}"]
    assert spec.metadata["kernel_provisioner"] == {
        "provisioner_name": "gpuallocd",
        "config": {"count": 3, "policy": "simple", "ttl": 600.0, "wait": True},
    }


def test_example_kernelspec_builds_the_provisioner() -> None:
    """The example kernelspec in contrib/jupyter selects this provisioner with valid settings."""
    spec = KernelSpec.from_resource_dir(str(EXAMPLE / "python3-gpu2"))
    factory = KernelProvisionerFactory.instance()
    provisioner = factory.create_provisioner_instance("example", spec, parent=None)
    assert isinstance(provisioner, GpuallocdProvisioner)
    assert provisioner.lease_request().count == 2
