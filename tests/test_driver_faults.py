"""The GPU driver as a fault: an NVML call that hangs for real (the recorded machine blocks in
it until the test releases a FIFO) and a GPU that falls off the bus and comes back, against
a real daemon process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from gpulease import Client, GpuallocError

from tests.harness import DaemonPaths, ProcessDaemon, wait_for

MACHINE = "dgx-a100-mig"
GPU0 = "GPU-838b9f62-4862-589c-b545-4ae61c92f8ff"
GPU3 = "GPU-f06d330d-af21-5a36-84a7-d3d20d41fb7f"
GPU5 = "GPU-463cb218-c257-514c-90b2-c5beb672b6e2"  # a whole GPU (no MIG)
HUNG = "nvmlDeviceGetMemoryInfo"
SET_LIMIT = "nvmlDeviceSetPowerManagementLimit"


class Machine:
    """The live file of the recorded machine and the FIFO that releases a hung call."""

    def __init__(self, root: Path) -> None:
        self.live = root / "live.json"
        self.fifo = root / "release"
        os.mkfifo(self.fifo)
        self.content: dict[str, Any] = {}
        self.write()

    @property
    def inventory(self) -> str:
        return f"nvml-recording:{MACHINE}?live={self.live}"

    def write(self, **changes: Any) -> None:
        self.content.update(changes)
        self.content = {k: v for k, v in self.content.items() if v is not None}
        self.live.write_text(json.dumps(self.content))

    def hang(self, call: str) -> None:
        self.write(hang={"call": call, "until": str(self.fifo)})

    def release(self) -> None:
        """Take the hang out of the file, then let the hung call return."""
        self.write(hang=None)
        fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO: nobody is hung in it
        os.close(fd)

    def hold(self) -> int:
        """Once a call hangs in the FIFO, keep it hung: the FIFO opened for writing (the
        call gets past open() and blocks reading until the test closes the descriptor)."""
        held: list[int] = []

        def hung_in_it() -> bool:
            try:
                held.append(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # ENXIO: no call blocks in it yet
                return False
            return True

        wait_for(hung_in_it, 30, what="a driver call hung in the FIFO")
        return held[0]

    def limits(self) -> dict[str, int]:
        """The power limits the cards have (the recorded machine keeps them in a file)."""
        try:
            return dict(json.loads(self.live.with_name("live.json.limits").read_text()))
        except (OSError, ValueError):
            return {}


@pytest.fixture
def machine(paths: DaemonPaths) -> Machine:
    return Machine(paths.root)


@pytest.fixture
def daemon(paths: DaemonPaths, machine: Machine) -> Iterator[ProcessDaemon]:
    started = ProcessDaemon(
        paths,
        inventory=machine.inventory,
        sample_interval_seconds=0.05,
        driver_call_timeout_seconds=0.5,
    ).start()
    yield started
    if started.process is not None and started.process.poll() is None:
        with_hang = "hang" in machine.content
        if with_hang:
            machine.release()
        assert started.stop() == 0, started.stderr()


def hung_calls(client: Client) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = client.health()["driver"]["hung_calls"]
    return [call for call in calls if call["call"] == HUNG]


def driver_state(client: Client) -> str:
    """`ok`, or `hung` while any driver call or the task waiting on it is overdue."""
    state: str = client.health()["driver"]["state"]
    return state


def threads(daemon: ProcessDaemon) -> int:
    assert daemon.process is not None
    return len(os.listdir(f"/proc/{daemon.process.pid}/task"))


def gpu(client: Client, uuid: str) -> Any:
    return next(status for status in client.status() if status.uuid == uuid)


def test_a_hung_nvml_call_is_named_and_the_api_answers_meanwhile(
    paths: DaemonPaths, daemon: ProcessDaemon, machine: Machine
) -> None:
    """A sample hung in nvmlDeviceGetMemoryInfo: health, diagnostics and doctor name it and
    how long it has hung; grants and releases go on from the ledger; no thread piles up
    behind it; a rescan is refused naming it; sampling resumes once it returns."""
    with daemon.client() as client:
        machine.write(**{GPU0: {"utilization_gpu_percent": 11}})
        wait_for(
            lambda: gpu(client, GPU0).raw["utilization_percent"] == 11, 30, what="a first sample"
        )
        machine.hang(HUNG)
        wait_for(lambda: hung_calls(client), timeout=30, what="the hung call in health")
        before = threads(daemon)
        machine.write(**{GPU0: {"utilization_gpu_percent": 77}})  # unseen while hung
        wait_for(lambda: hung_calls(client)[0]["seconds"] >= 2.0, 30, what="20 skipped samples")
        assert threads(daemon) <= before
        assert gpu(client, GPU0).raw["utilization_percent"] == 11
        lease = client.allocate(count=2)
        assert client.free(lease.id).state == "freed"
        report = client.health()["driver"]
        assert report["state"] == "hung" and report["paused"] == ["sample"]
        assert any(c["call"] == HUNG for c in client.diagnostics()["driver"]["hung_calls"])
        with pytest.raises(GpuallocError) as refused:
            client.rescan()
        assert refused.value.code == "inventory_error" and HUNG in str(refused.value)
        doctor = subprocess.run(
            [sys.executable, "-m", "gpuallocd.cli", "--socket", str(paths.socket), "doctor"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert f"GPU driver call hung: {HUNG} for " in doctor.stdout, doctor.stdout
        machine.release()
        wait_for(
            lambda: gpu(client, GPU0).raw["utilization_percent"] == 77, 30, what="sampling again"
        )
        wait_for(lambda: not hung_calls(client), timeout=30, what="health back to ok")
    assert "the GPU driver answered again; sample resumes" in daemon.stderr()


def test_a_lost_gpu_keeps_its_lease_is_granted_to_nobody_and_comes_back(
    daemon: ProcessDaemon, machine: Machine
) -> None:
    """GPU 3 falls off the bus (NVML: GPU is lost) under a lease: the lease stays as it was,
    status shows the GPU `lost`, no grant takes it; when it answers again it is free."""
    with daemon.client() as client:
        held = client.allocate(gpus=[3])
        machine.write(**{GPU3: {"lost": True}})
        wait_for(lambda: gpu(client, GPU3).state == "lost", 30, what="GPU 3 lost")
        assert client.lease(held.id) == held

        def told() -> list[dict[str, Any]]:
            return [e for e in client.history(held.id) if e["event"] == "unhealthy"]

        wait_for(told, timeout=30, what="the holder told")
        assert "fallen off the bus" in told()[0]["detail"]
        client.free(held.id)
        with pytest.raises(GpuallocError):
            client.allocate(gpus=[3])
        others = client.allocate(count=6)  # every other whole GPU
        assert GPU3 not in others.uuids
        client.free(others.id)
        machine.write(**{GPU3: None})
        wait_for(lambda: gpu(client, GPU3).state == "free", 30, what="GPU 3 back")
        assert client.allocate(gpus=[3]).uuids == (GPU3,)


@pytest.mark.parametrize("call", [HUNG, "nvmlShutdown"])
def test_a_daemon_stops_while_a_driver_call_hangs(
    daemon: ProcessDaemon, machine: Machine, call: str
) -> None:
    """SIGTERM while a sample hangs, or while NVML's own shutdown hangs: the daemon exits 0
    all the same (a hung call holds a daemon thread, and closing is given the deadline)."""
    machine.hang(call)
    if call == HUNG:
        with daemon.client() as client:
            wait_for(lambda: hung_calls(client), timeout=30, what="the hung call in health")
    assert daemon.stop() == 0, daemon.stderr()
    if call == "nvmlShutdown":
        assert "closing the GPU backend did not finish within 0.5 s" in daemon.stderr()
    assert daemon.process is not None and daemon.process.poll() == 0  # nobody left in the FIFO


def test_power_is_neither_read_nor_set_on_the_loop_while_a_driver_call_hangs(
    daemon: ProcessDaemon, machine: Machine
) -> None:
    """While NVML hangs, a grant that asks for a power cap is refused at once with
    nvml_error (nothing recorded); a grant without a cap is served; once the driver answers,
    a cap is set again."""
    with daemon.client() as client:
        machine.hang(HUNG)
        wait_for(lambda: hung_calls(client), 30, what="the hung call named")
        with pytest.raises(GpuallocError) as refused:
            client.allocate(gpus=[5], ttl=600, power_limit_watts=250)
        assert refused.value.code == "nvml_error" and client.leases() == []
        plain = client.allocate(gpus=[5], ttl=600)
        client.free(plain.id)
        machine.release()
        wait_for(lambda: client.health()["driver"]["state"] == "ok", 30, what="answering again")
        capped = client.allocate(gpus=[5], ttl=600, power_limit_watts=250)
        assert machine.limits()[GPU5] == 250_000
        client.free(capped.id)


def test_the_api_answers_others_while_the_first_power_call_hangs(
    paths: DaemonPaths, machine: Machine
) -> None:
    """alice's grant asks for a cap and the driver hangs setting it, the first call to hang:
    while the test holds that call hung, another client's allocate+free and /v1/health are
    answered and alice is still waiting; once the driver answers, she has her lease, capped."""
    daemon = ProcessDaemon(
        paths,
        inventory=machine.inventory,
        sample_interval_seconds=0.05,
        driver_call_timeout_seconds=600,  # the set is never given up on in this test
    ).start()
    held: int | None = None
    try:
        with ThreadPoolExecutor(1) as pool, daemon.client(timeout=60) as other:
            machine.hang(SET_LIMIT)
            asked = pool.submit(capped_grant, daemon)
            held = machine.hold()
            lease = other.allocate(gpus=[6])
            assert other.free(lease.id).state == "freed"
            assert other.health()["status"] == "ok"
            assert other.leases()[0].gpus[0].uuid == GPU5  # alice's: granted, cap being set
            assert not asked.done()
            machine.write(hang=None)
            os.close(held)
            held = None
            capped = asked.result(timeout=60)
        assert capped.raw["power_limit_watts"] == 250 and machine.limits()[GPU5] == 250_000
    finally:
        if held is not None:
            machine.write(hang=None)
            os.close(held)
        assert daemon.stop() == 0, daemon.stderr()


def capped_grant(daemon: ProcessDaemon) -> Any:
    with daemon.client(timeout=60) as client:
        return client.allocate(gpus=[5], ttl=600, power_limit_watts=250)


def owed_put_backs(client: Client) -> list[dict[str, Any]]:
    owed = client.diagnostics()["pending_cleanups"]
    return [entry for entry in owed if entry["kind"] == "power_limit"]


def test_a_put_back_the_driver_cannot_do_is_owed_shown_and_done_after_a_restart(
    paths: DaemonPaths, daemon: ProcessDaemon, machine: Machine
) -> None:
    """alice's capped lease ends while setting a power limit hangs: putting her GPU's limit
    back is owed work, failing, shown by `doctor`; the daemon restarted meanwhile still owes
    it, and does it once the driver answers (the card has its 400 W back, nothing owed)."""
    with daemon.client() as client:
        lease = client.allocate(gpus=[5], ttl=600, power_limit_watts=250)
        assert machine.limits()[GPU5] == 250_000
        machine.hang(SET_LIMIT)
        client.free(lease.id)
        wait_for(lambda: [e for e in owed_put_backs(client) if e["attempts"]], 30, what="a try")
        (owed,) = owed_put_backs(client)
        assert (owed["target"], owed["lease_id"]) == (GPU5, lease.id)
        assert "not answering" in owed["last_error"]
        assert f"power_limit {GPU5} (" in doctor(paths)
    assert daemon.stop() == 0, daemon.stderr()
    tried = owed["attempts"]
    assert machine.limits()[GPU5] == 250_000
    again = ProcessDaemon(
        paths,
        inventory=machine.inventory,
        initialise=False,
        sample_interval_seconds=0.05,
        driver_call_timeout_seconds=0.5,
    ).start()
    try:
        with again.client() as client:
            held = machine.hold()  # the restarted daemon tries it: hung again
            wait_for(lambda: owed_put_backs(client)[0]["attempts"] > tried, 30, what="a retry")
            machine.write(hang=None)
            os.close(held)
            wait_for(lambda: not owed_put_backs(client), 30, what="the put-back done")
        assert machine.limits()[GPU5] == 400_000
    finally:
        assert again.stop() == 0, again.stderr()


def doctor(paths: DaemonPaths) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "gpuallocd.cli", "--socket", str(paths.socket), "doctor"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout
