"""Live state from NVML: memory, utilisation, processes and their owners; lost GPUs."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gpuallocd.host.proc import process_owner
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.testing import FakeNvml, nvml_inventory

NO_SUCH_PID = 2**31 - 1  # above any pid_max Linux allows


@pytest.fixture
def dgx() -> Iterator[tuple[NvmlInventory, FakeNvml]]:
    inventory, fake = nvml_inventory("dgx-a100-mig", xid_wait_ms=20)
    yield inventory, fake
    inventory.close()


def test_sample_reports_memory_utilization_and_processes(
    dgx: tuple[NvmlInventory, FakeNvml],
) -> None:
    """GPU 0 of the recording runs one process: its memory, utilisation and pid show."""
    inventory, fake = dgx
    state = inventory.sample()[fake.uuids()[0]]
    assert state.healthy
    assert state.memory_used_bytes == 10244 * 2**20
    assert state.utilization_percent == 87.0
    assert [(p.pid, p.used_memory_bytes) for p in state.processes] == [(4242, 10240 * 2**20)]


def test_process_owner_is_the_uid_of_its_proc_entry(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """Our own pid reads as our uid; a pid that does not exist reads as unknown."""
    inventory, fake = dgx
    uuid = fake.uuids()[1]
    fake.set_processes(uuid, [(os.getpid(), 2**30), (NO_SUCH_PID, None)])
    processes = inventory.sample()[uuid].processes
    assert [(p.pid, p.uid, p.used_memory_bytes) for p in processes] == [
        (os.getpid(), os.getuid(), 2**30),
        (NO_SUCH_PID, None, None),
    ]


def test_process_owner_helper() -> None:
    """process_owner is the owner of /proc/PID, or None when there is no such process."""
    assert process_owner(os.getpid()) == os.getuid()
    assert process_owner(NO_SUCH_PID) is None


def test_every_gpu_is_sampled_with_four_queries(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """One sample costs memory, utilisation, process and energy-counter queries per GPU,
    nothing more (grants and ends take the counter the last sample read)."""
    inventory, fake = dgx
    before = sum(fake.calls.values())
    states = inventory.sample()
    assert set(states) == set(fake.uuids())
    assert sum(fake.calls.values()) - before == 4 * 8


def test_mig_gpu_without_utilization_is_still_healthy(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """NVML cannot give utilisation in MIG mode: unknown, not unhealthy."""
    inventory, fake = dgx
    state = inventory.sample()[fake.uuids()[7]]
    assert state.healthy and state.utilization_percent is None


def test_gpu_lost_after_start_is_unhealthy_and_the_others_are_not(
    dgx: tuple[NvmlInventory, FakeNvml],
) -> None:
    """A GPU falling off the bus shows in its state; sample() does not raise."""
    inventory, fake = dgx
    lost = fake.uuids()[3]
    fake.lose_gpu(lost)
    states = inventory.sample()
    assert not states[lost].healthy
    assert "fallen off the bus" in (states[lost].health_reason or "")
    assert all(s.healthy for u, s in states.items() if u != lost)


def test_gpu_is_healthy_again_once_it_can_be_read(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """A lost GPU that reads again is healthy again, with no rescan needed."""
    inventory, fake = dgx
    uuid = fake.uuids()[3]
    fake.lose_gpu(uuid)
    assert not inventory.sample()[uuid].healthy
    fake.restore_gpu(uuid)
    assert inventory.sample()[uuid].healthy


def test_unsupported_process_query_is_no_processes(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """Where NVML may not list processes (permissions), the GPU stays healthy with none."""
    inventory, fake = dgx
    uuid = fake.uuids()[0]
    fake.set_error(uuid, "processes", "NO_PERMISSION")
    state = inventory.sample()[uuid]
    assert state.healthy and state.processes == ()


def test_unknown_error_on_a_gpu_is_unhealthy(dgx: tuple[NvmlInventory, FakeNvml]) -> None:
    """An NVML error that is not "cannot tell" marks the GPU unhealthy with NVML's words."""
    inventory, fake = dgx
    uuid = fake.uuids()[2]
    fake.set_error(uuid, "memory_used_bytes", "UNKNOWN")
    state = inventory.sample()[uuid]
    assert not state.healthy
    assert "nvmlDeviceGetMemoryInfo" in (state.health_reason or "")
