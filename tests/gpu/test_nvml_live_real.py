"""Live state, health events and capture against this machine's real GPUs."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuallocd.errors import NvmlError
from gpuallocd.inventory import open_inventory
from gpuallocd.inventory.nvml.api import NvmlApi
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.testing.capture import capture
from gpuallocd.topology import topology_to_json

pytestmark = pytest.mark.gpu

_HOLD_GPU = {
    "torch": "import sys, torch; x = torch.zeros(1, device='cuda:0'); print('ready', flush=True);"
    " sys.stdin.read()",
    "cupy": "import sys, cupy; x = cupy.zeros(1); print('ready', flush=True); sys.stdin.read()",
}


@pytest.fixture
def cuda_process() -> Iterator[subprocess.Popen[str]]:
    """A process holding a CUDA context on GPU 0 until its stdin closes."""
    library = next((m for m in _HOLD_GPU if importlib.util.find_spec(m)), None)
    if library is None:
        pytest.skip("neither torch nor cupy is importable here to start a CUDA process")
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD_GPU[library]],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None
    assert process.stdout.readline().strip() == "ready"  # blocks until the context exists
    yield process
    process.stdin.close()
    process.wait(timeout=60)


def test_process_list_shows_a_cuda_process(
    real_inventory: NvmlInventory, cuda_process: subprocess.Popen[str]
) -> None:
    """A process with a CUDA context on GPU 0 is in GPU 0's sampled process list."""
    gpu0 = real_inventory.topology().by_index()[0]
    if gpu0.mig_mode:
        pytest.skip("GPU 0 is in MIG mode; NVML lists processes per MIG instance")
    state = real_inventory.sample()[gpu0.uuid]
    assert cuda_process.pid in {p.pid for p in state.processes}, (
        "pid not seen: is the test in another PID namespace than the driver?"
    )
    assert state.memory_used_bytes is not None and state.memory_used_bytes > 0


def test_every_gpu_is_healthy_when_idle(real_inventory: NvmlInventory) -> None:
    """Without Xid events every readable GPU samples as healthy, with memory figures."""
    for uuid, state in real_inventory.sample().items():
        assert state.healthy, (uuid, state.health_reason)
        assert state.memory_used_bytes is not None


def test_xid_events_register_on_every_gpu(nvml_api: NvmlApi) -> None:
    """Critical Xid events can be registered on each GPU, or NVML says it does not support it."""
    registered = 0
    events = nvml_api.event_set()
    try:
        for index in range(nvml_api.device_count()):
            try:
                nvml_api.watch_xids(nvml_api.handle(index), events)
                registered += 1
            except NvmlError as exc:
                assert "not supported" in exc.message.lower(), exc.message
    finally:
        nvml_api.free_event_set(events)
    if registered == 0:
        pytest.skip("NVML supports Xid events on none of these GPUs")


def test_capture_replays_through_the_fake_as_the_real_node(
    real_inventory: NvmlInventory, tmp_path: Path
) -> None:
    """`capture` of this machine, replayed by FakeNvml, gives the real backend's topology."""
    recording = capture(name="real-node", with_processes=False)
    path = tmp_path / "real-node.json"
    path.write_text(json.dumps(recording, indent=2))
    replayed = open_inventory(f"nvml-recording:{path}")
    try:
        assert topology_to_json(replayed.topology()) == topology_to_json(real_inventory.topology())
    finally:
        replayed.close()
