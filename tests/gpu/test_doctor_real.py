"""`gpuallocctl doctor` on a machine with real NVIDIA GPUs: its NVML and device checks."""

from __future__ import annotations

import pytest

from gpuallocd.cli.administering.doctor_checks import OK, device_files, nvml
from gpuallocd.inventory.nvml.api import NvmlApi
from tests.gpu.conftest import nvidia_smi

pytestmark = pytest.mark.gpu


def test_the_nvml_check_agrees_with_nvidia_smi(nvml_api: NvmlApi) -> None:
    """NVML loads; its GPUs are those `nvidia-smi -L` lists and those the daemon would know."""
    uuids = [nvml_api.uuid(nvml_api.handle(i)) for i in range(nvml_api.device_count())]
    listed = nvidia_smi("-L")
    check = nvml("nvml", uuids)
    assert check.status == OK, check.message
    assert f"{len(uuids)} GPU(s)" in check.message and "nvidia-smi -L agrees" in check.message
    assert all(uuid in listed for uuid in uuids)


def test_the_device_check_lists_the_gpu_device_files(nvml_api: NvmlApi) -> None:
    check = device_files("nvml")
    assert check.status == OK and "nvidiactl" in check.message
