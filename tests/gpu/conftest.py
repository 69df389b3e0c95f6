"""Real-GPU checks: run with `pytest -m gpu` on a machine with NVIDIA GPUs.

Every test here is marked `gpu`. Without NVML (no driver, no GPU) each one skips and says
why, so the default test run collects them and skips them.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest

from gpuallocd.errors import GpuallocError
from gpuallocd.inventory.nvml.api import NvmlApi
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.inventory.nvml.gate import NvmlGate


def _nvml_or_skip() -> NvmlApi:
    api = NvmlApi(NvmlGate())
    try:
        api.start()
        count = api.device_count()
    except (GpuallocError, ImportError, OSError) as exc:
        api.close()
        pytest.skip(f"no NVIDIA GPU here: NVML could not start ({exc})")
    if count == 0:
        api.close()
        pytest.skip("no NVIDIA GPU here: NVML counts 0 devices")
    return api


@pytest.fixture(scope="module")
def nvml_api() -> Iterator[NvmlApi]:
    """NVML on this machine, through the project's gate; skips the test without a GPU."""
    api = _nvml_or_skip()
    yield api
    api.close()


@pytest.fixture(scope="module")
def real_inventory(nvml_api: NvmlApi) -> Iterator[NvmlInventory]:
    """The NVML backend over this machine's real GPUs."""
    inventory = NvmlInventory(name="real-node")
    yield inventory
    inventory.close()


def nvidia_smi(*args: str) -> str:
    """The output of `nvidia-smi ARGS`; skips the test where nvidia-smi is not installed."""
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not installed; nothing to compare with")
    return subprocess.run(
        ["nvidia-smi", *args], check=True, capture_output=True, text=True, timeout=60
    ).stdout
